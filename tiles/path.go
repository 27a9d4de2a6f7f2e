package tiles

import (
	"errors"
	"math"
	"strconv"
	"strings"
)

// tileRef names one resource below tile/: a hash tile (level 0 to 63) or,
// with level entriesLevel, an entry bundle.
type tileRef struct {
	level int   // 0..MaxLevel, or entriesLevel
	index int64 // the tile's N
	width int   // 1..TileWidth; TileWidth is a full tile
}

// entriesLevel marks an entry bundle in a tileRef.
const entriesLevel = -1

// errMalformed refuses a path that breaks the syntax of C2SP tlog-tiles
// (400); errOutOfRange refuses a well-formed index no int64 holds (404:
// no log is that large).
var (
	errMalformed  = errors.New("malformed tile path")
	errOutOfRange = errors.New("tile index out of range")
)

// maxIndexElems is how many 3-digit elements an int64 index needs at most
// (19 digits).
const maxIndexElems = 7

// parseTilePath parses p, the part of a tile path after "tile/", as
// C2SP tlog-tiles spells it: "<L>/<N>[.p/<W>]" or "entries/<N>[.p/<W>]".
// Only the canonical spelling is accepted: no leading zeros in L or W, N in
// zero-padded 3-digit elements all but the last prefixed with "x" and no
// leading "x000" element, W between 1 and 255.
func parseTilePath(p string) (tileRef, error) {
	var ref tileRef
	lv, rest, ok := strings.Cut(p, "/")
	if !ok {
		return ref, errMalformed
	}
	if lv == "entries" {
		ref.level = entriesLevel
	} else {
		l, ok := parseSmall(lv, MaxLevel)
		if !ok {
			return ref, errMalformed
		}
		ref.level = l
	}

	elems := strings.Split(rest, "/")
	ref.width = TileWidth
	if n := len(elems); n >= 2 && strings.HasSuffix(elems[n-2], ".p") {
		w, ok := parseSmall(elems[n-1], TileWidth-1)
		if !ok || w == 0 {
			return ref, errMalformed
		}
		ref.width = w
		elems[n-2] = strings.TrimSuffix(elems[n-2], ".p")
		elems = elems[:n-1]
	}
	if len(elems) > maxIndexElems {
		return ref, errMalformed
	}
	var n int64
	overflow := false
	for i, e := range elems {
		last := i == len(elems)-1
		if !last {
			if !strings.HasPrefix(e, "x") {
				return ref, errMalformed
			}
			e = e[1:]
		}
		if len(e) != 3 || !isDigits(e) {
			return ref, errMalformed
		}
		if i == 0 && !last && e == "000" {
			return ref, errMalformed
		}
		g := int64(e[0]-'0')*100 + int64(e[1]-'0')*10 + int64(e[2]-'0')
		if n > (math.MaxInt64-g)/1000 {
			overflow = true
		}
		n = n*1000 + g
	}
	if overflow {
		return ref, errOutOfRange
	}
	ref.index = n
	return ref, nil
}

// parseSmall parses a decimal in [0, max] with no sign and no leading zero.
func parseSmall(s string, max int) (int, bool) {
	if s == "" || len(s) > 3 || !isDigits(s) || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	v, err := strconv.Atoi(s)
	if err != nil || v > max {
		return 0, false
	}
	return v, true
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// String spells ref as C2SP tlog-tiles does, "tile/" included: the inverse
// of parseTilePath.
func (ref tileRef) String() string {
	var b strings.Builder
	b.WriteString("tile/")
	if ref.level == entriesLevel {
		b.WriteString("entries")
	} else {
		b.WriteString(strconv.Itoa(ref.level))
	}
	var groups []int64
	for n := ref.index; ; n /= 1000 {
		groups = append(groups, n%1000)
		if n < 1000 {
			break
		}
	}
	for i := len(groups) - 1; i >= 0; i-- {
		b.WriteByte('/')
		if i > 0 {
			b.WriteByte('x')
		}
		g := groups[i]
		b.WriteByte(byte('0' + g/100))
		b.WriteByte(byte('0' + g/10%10))
		b.WriteByte(byte('0' + g%10))
	}
	if ref.width < TileWidth {
		b.WriteString(".p/")
		b.WriteString(strconv.Itoa(ref.width))
	}
	return b.String()
}
