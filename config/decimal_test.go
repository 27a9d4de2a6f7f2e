package config_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/roompub/roompub/config"
)

// countsCmd has integer flags of both signs, as serve's counts are.
type countsCmd struct {
	Partitions int    `name:"partitions" default:"1"`
	Every      uint64 `name:"every"`
	Delta      int32  `name:"delta"`
}

func (c *countsCmd) Run(p *parsed) error { p.cmd, p.calls = c, p.calls+1; return nil }

// TestRunIntegersDecimal: an integer flag takes decimal digits only.
// Kong alone parses with Go's base prefixes, so --partitions=0x2 was 2
// and 010 was 8; they are refused naming the flag and the value.
func TestRunIntegersDecimal(t *testing.T) {
	run := func(args ...string) (*countsCmd, int, string) {
		var g struct {
			Counts countsCmd `cmd:""`
		}
		var p parsed
		var out, errOut bytes.Buffer
		status := config.Run("test", "test", "v0", &g, append([]string{"counts"}, args...), &out, &errOut, &p)
		c, _ := p.cmd.(*countsCmd)
		return c, status, errOut.String()
	}
	for _, tt := range []struct {
		args []string
		want countsCmd
	}{
		{nil, countsCmd{Partitions: 1}},
		{[]string{"--partitions=2", "--every", "18446744073709551615", "--delta=-7"}, countsCmd{Partitions: 2, Every: 1<<64 - 1, Delta: -7}},
		{[]string{"--partitions", "0", "--every=0", "--delta", "+3"}, countsCmd{Partitions: 0, Delta: 3}},
	} {
		c, status, stderr := run(tt.args...)
		if status != config.ExitOK || c == nil || *c != tt.want {
			t.Errorf("%q: status %d, %+v, want %+v (%s)", tt.args, status, c, tt.want, stderr)
		}
	}
	for _, tt := range []struct{ arg, want string }{
		{"--partitions=0x2", `--partitions: want a decimal integer, got "0x2"`},
		{"--partitions=010", `--partitions: want a decimal integer, got "010"`},
		{"--partitions=0b10", `"0b10"`},
		{"--partitions=0o7", `"0o7"`},
		{"--partitions=1_000", `"1_000"`},
		{"--partitions=-0x1", `"-0x1"`},
		{"--partitions= 2", `" 2"`},
		{"--every=0X10", `--every: want a decimal integer, got "0X10"`},
		{"--every=-1", `--every: want a decimal integer from 0 to 18446744073709551615, got "-1"`},
		{"--every=18446744073709551616", `--every: want a decimal integer from 0 to 18446744073709551615, got "18446744073709551616"`},
		{"--delta=2147483648", `--delta: want a decimal integer from -2147483648 to 2147483647, got "2147483648"`},
	} {
		c, status, stderr := run(tt.arg)
		if status != config.ExitUsage || c != nil || !strings.Contains(stderr, tt.want) {
			t.Errorf("%s: status %d, %+v, stderr %q; want exit %d and %q", tt.arg, status, c, stderr, config.ExitUsage, tt.want)
		}
	}
}

// TestConfigFileIntegersAsWritten: a config file's value reaches the
// flag's mapper as written, so the YAML library's integer forms (0x2,
// 010 read as octal 8, 1e3 as a float) are refused as on the command
// line, not turned into other numbers first.
func TestConfigFileIntegersAsWritten(t *testing.T) {
	dir := t.TempDir()
	run := func(yaml string) (*countsCmd, int, string) {
		file := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		var p parsed
		var out, errOut bytes.Buffer
		var grammar struct {
			Config kong.ConfigFlag `name:"config"`
			Counts countsCmd       `cmd:""`
		}
		status := config.Run("test", "test", "v0", &grammar, []string{"--config", file, "counts"}, &out, &errOut, &p)
		c, _ := p.cmd.(*countsCmd)
		return c, status, errOut.String()
	}
	for yaml, want := range map[string]countsCmd{
		"partitions: 3\nevery: 18446744073709551615\n": {Partitions: 3, Every: 1<<64 - 1},
		"partitions: \"3\"\ndelta: -2\n":               {Partitions: 3, Delta: -2},
		"delta: &n 4\npartitions: *n\nevery: ~\n":      {Partitions: 4, Delta: 4},
	} {
		if c, status, stderr := run(yaml); status != config.ExitOK || c == nil || *c != want {
			t.Errorf("%q: status %d, %+v, want %+v (%s)", yaml, status, c, want, stderr)
		}
	}
	for yaml, want := range map[string]string{
		"partitions: 0x2\n":    `--partitions: want a decimal integer, got "0x2"`,
		"partitions: 010\n":    `--partitions: want a decimal integer, got "010"`,
		"every: 1e3\n":         `--every: want a decimal integer, got "1e3"`,
		"partitions: {a: 1}\n": `config file ` + filepath.Join(dir, "c.yaml") + `:1: partitions: want a value or a list of values, not a mapping`,
	} {
		if c, status, stderr := run(yaml); status != config.ExitUsage || c != nil || !strings.Contains(stderr, want) {
			t.Errorf("%q: status %d, %+v, stderr %q; want exit %d and %q", yaml, status, c, stderr, config.ExitUsage, want)
		}
	}
}
