package config_test

import (
	"bytes"
	"strings"
	"testing"

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
