package config

import (
	"fmt"
	"math"
	"reflect"
	"strconv"

	"github.com/alecthomas/kong"
)

// decimalIntegers are the kong options that map every integer flag (and
// config file value, which the YAML resolver hands kong as a string) with
// decimalInteger. Kong's own mappers parse with Go's base prefixes
// (strconv base 0): --partitions=0x2 was 2, 010 was 8 and 1_0 was 10.
func decimalIntegers() []kong.Option {
	var opts []kong.Option
	for _, k := range []reflect.Kind{reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64} {
		opts = append(opts, kong.KindMapper(k, kong.MapperFunc(decimalInteger)))
	}
	return opts
}

// decimalInteger sets target, of any integer kind, from a value in plain
// decimal: an optional sign, then 0 or digits without a leading zero.
// The error says what was wanted and what was given; kong puts the
// flag's name before it.
func decimalInteger(ctx *kong.DecodeContext, target reflect.Value) error {
	t, err := ctx.Scan.PopValue("integer")
	if err != nil {
		return err
	}
	s, ok := t.Value.(string)
	if !ok {
		s = fmt.Sprint(t.Value) // a default or a value set by code: Go's own %v is decimal
	}
	if !plainDecimal(s) {
		return fmt.Errorf("want a decimal integer, got %q", s)
	}
	bits := target.Type().Bits()
	if target.CanInt() {
		n, err := strconv.ParseInt(s, 10, bits)
		if err != nil {
			lo, hi := int64(math.MinInt64)>>(64-bits), int64(math.MaxInt64)>>(64-bits)
			return fmt.Errorf("want a decimal integer from %d to %d, got %q", lo, hi, s)
		}
		target.SetInt(n)
		return nil
	}
	n, err := strconv.ParseUint(s, 10, bits)
	if err != nil {
		return fmt.Errorf("want a decimal integer from 0 to %d, got %q", uint64(math.MaxUint64)>>(64-bits), s)
	}
	target.SetUint(n)
	return nil
}

// plainDecimal reports whether s is an optional sign and then "0" or
// digits that do not start with 0: no base prefix, underscore or space.
func plainDecimal(s string) bool {
	if s != "" && (s[0] == '-' || s[0] == '+') {
		s = s[1:]
	}
	if s == "" || s[0] == '0' && len(s) > 1 {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
