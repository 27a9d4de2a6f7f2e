package config_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/roompub/roompub/config"
)

// parsed is what a command of argsGrammar was given.
type parsed struct {
	top   string
	cmd   any
	calls int
}

// listCmd has a positional slice, as `publisher verify` has.
type listCmd struct {
	JSON  bool     `name:"json"`
	Color bool     `name:"color" negatable:"" default:"true"`
	Host  []string `name:"host"`
	Level string   `name:"level" short:"l"`
	Count int      `name:"v" short:"v" type:"counter"`
	Paths []string `arg:"" name:"path" optional:""`
}

func (c *listCmd) Run(p *parsed) error { p.cmd, p.calls = c, p.calls+1; return nil }

// oneCmd has one positional string, as `publisher sign` has.
type oneCmd struct {
	JSON bool   `name:"json"`
	File string `arg:"" name:"file"`
}

func (c *oneCmd) Run(p *parsed) error { p.cmd, p.calls = c, p.calls+1; return nil }

type argsGrammar struct {
	Top   string `name:"top"`
	Group struct {
		List listCmd `cmd:""`
	} `cmd:""`
	List listCmd `cmd:"" aliases:"ls"`
	One  oneCmd  `cmd:""`
}

// runArgs runs args against argsGrammar with config.Run and returns what
// the command was given, the exit status and stderr.
func runArgs(t *testing.T, args ...string) (*parsed, int, string) {
	t.Helper()
	var g argsGrammar
	var p parsed
	var out, errOut bytes.Buffer
	status := config.Run("test", "test", "v0", &g, args, &out, &errOut, &p)
	p.top = g.Top
	return &p, status, errOut.String()
}

// TestRunFlagsAmongPositionals: a flag may stand between two positional
// arguments of a slice (kong alone refuses the second as an unexpected
// argument), with or without its value, as a short flag, negated, and
// after the command name of a group; "--" still ends the flags.
func TestRunFlagsAmongPositionals(t *testing.T) {
	tests := []struct {
		args []string
		want string // fmt %+v of the command given
		top  string
	}{
		{[]string{"list", "A", "--json", "B"}, "&{JSON:true Color:true Host:[] Level: Count:0 Paths:[A B]}", ""},
		{[]string{"list", "A", "--host", "h1", "B", "--host=h2", "C"}, "&{JSON:false Color:true Host:[h1 h2] Level: Count:0 Paths:[A B C]}", ""},
		{[]string{"list", "A", "--no-color", "B", "--json=false"}, "&{JSON:false Color:false Host:[] Level: Count:0 Paths:[A B]}", ""},
		{[]string{"list", "A", "-l", "x", "B", "-vv", "C", "-ly"}, "&{JSON:false Color:true Host:[] Level:y Count:2 Paths:[A B C]}", ""},
		{[]string{"list", "A", "-vl", "x", "B"}, "&{JSON:false Color:true Host:[] Level:x Count:1 Paths:[A B]}", ""},
		{[]string{"ls", "A", "--json", "B"}, "&{JSON:true Color:true Host:[] Level: Count:0 Paths:[A B]}", ""},
		{[]string{"group", "list", "A", "--top", "u", "B", "--json"}, "&{JSON:true Color:true Host:[] Level: Count:0 Paths:[A B]}", "u"},
		{[]string{"--top", "t", "list", "A", "--json", "B"}, "&{JSON:true Color:true Host:[] Level: Count:0 Paths:[A B]}", "t"},
		// "--" ends the flags, wherever it stands.
		{[]string{"list", "A", "--", "--json", "-B", "list"}, "&{JSON:false Color:true Host:[] Level: Count:0 Paths:[A --json -B list]}", ""},
		{[]string{"list", "--json", "--", "A", "-"}, "&{JSON:true Color:true Host:[] Level: Count:0 Paths:[A -]}", ""},
		{[]string{"list", "-", "--json"}, "&{JSON:true Color:true Host:[] Level: Count:0 Paths:[-]}", ""},
		// A positional string takes flags on both sides.
		{[]string{"one", "--json", "F"}, "&{JSON:true File:F}", ""},
		{[]string{"one", "F", "--json"}, "&{JSON:true File:F}", ""},
		{[]string{"one", "--", "-F"}, "&{JSON:false File:-F}", ""},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			p, status, stderr := runArgs(t, tt.args...)
			if status != config.ExitOK || p.calls != 1 {
				t.Fatalf("status %d, %d runs: %s", status, p.calls, stderr)
			}
			if got := fmt.Sprintf("%+v", p.cmd); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
			if p.top != tt.top {
				t.Errorf("--top %q, want %q", p.top, tt.top)
			}
		})
	}
}

// TestRunFlagsAmongPositionalsErrors: what the reordering cannot tell is
// left to kong, which reports it as before.
func TestRunFlagsAmongPositionalsErrors(t *testing.T) {
	for _, tt := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"list", "A", "--frobnicate", "B"}, "unknown flag --frobnicate"},
		{[]string{"list", "A", "-q", "B"}, "unknown flag -q"},
		{[]string{"list", "A", "--level"}, "--level: expected string value"},
		{[]string{"one", "F", "G"}, "unexpected argument G"},
		{[]string{"A", "list"}, "unexpected argument A"},
		{[]string{"group", "A", "list", "B"}, "unexpected argument A"},
		{[]string{"list", "A", "--json", "B", "--level", "--json"}, "--level: expected string value"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			p, status, stderr := runArgs(t, tt.args...)
			if status != config.ExitUsage || p.calls != 0 || !strings.Contains(stderr, tt.stderr) {
				t.Errorf("status %d, %d runs, stderr %q; want %d and %q", status, p.calls, stderr, config.ExitUsage, tt.stderr)
			}
		})
	}
}

// TestRunRefusesNonUTF8Arguments: an argument that is not UTF-8 (a room
// id or path with a stray byte) is refused with its position, the command
// never runs; kong would have read it with U+FFFD in place of the byte.
func TestRunRefusesNonUTF8Arguments(t *testing.T) {
	for _, c := range []struct {
		args []string
		n    int // the argument refused, from 1
	}{
		{[]string{"one", "a\xffb"}, 2},
		{[]string{"list", "--host", "h", "--level=x\xc3", "p"}, 4},
	} {
		p, status, errOut := runArgs(t, c.args...)
		want := fmt.Sprintf("argument %d (%q) is not valid UTF-8", c.n, c.args[c.n-1])
		if status != config.ExitUsage || p.calls != 0 || !strings.Contains(errOut, want) {
			t.Errorf("%q: status %d, %d calls, stderr %q; want %q", c.args, status, p.calls, errOut, want)
		}
	}
	// UTF-8 beyond ASCII passes as it is.
	if p, status, _ := runArgs(t, "one", "ü€😀"); status != config.ExitOK || p.cmd.(*oneCmd).File != "ü€😀" {
		t.Fatalf("status %d, %+v", status, p.cmd)
	}
}
