package checkpoint

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// roomIDPrefix is what every room id begins with (validate.CheckRoomID);
// the origin segment leaves it out, as subject tokens do.
const roomIDPrefix = "room:"

// roomSegment separates a deployment origin from a room's segment in a
// room origin: "<deployment origin>/room/<segment>".
const roomSegment = "/room/"

// MaxOriginBytes bounds a deployment origin: it is an origin line and, in
// a key name, part of every signature line (C2SP signed-note bounds a
// note, not a line; 255 is what a host name and short path need).
const MaxOriginBytes = 255

// CheckOrigin reports whether o can be a deployment's origin: a
// schema-less URL such as "evidence.example.org/roompub" (C2SP
// tlog-checkpoint recommends one; it is also the deployment log's key
// name, so C2SP signed-note's key name rules apply): 1 to MaxOriginBytes
// bytes of printable ASCII without space and '+', no scheme ("://"), and
// no leading or trailing '/', and no "/room/" (so no deployment origin
// is another's room origin). Errors say which rule failed.
func CheckOrigin(o string) error {
	switch {
	case o == "":
		return fmt.Errorf("origin is empty")
	case len(o) > MaxOriginBytes:
		return fmt.Errorf("origin is %d bytes, at most %d", len(o), MaxOriginBytes)
	case strings.Contains(o, "://"):
		return fmt.Errorf("origin %q has a scheme: write it without one (evidence.example.org/roompub)", clip(o))
	case strings.HasPrefix(o, "/") || strings.HasSuffix(o, "/"):
		return fmt.Errorf("origin %q begins or ends with '/'", clip(o))
	case strings.Contains(o, roomSegment):
		// a/room/b would be the origin of deployment a's room:b.
		return fmt.Errorf("origin %q holds %q, which room origins are made of", clip(o), roomSegment)
	}
	for i := 0; i < len(o); i++ {
		if c := o[i]; c <= ' ' || c >= 0x7f || c == '+' {
			return fmt.Errorf("origin %q holds %q at byte %d: only printable ASCII without space and '+'", clip(o), rune(c), i)
		}
	}
	return nil
}

// RoomOrigin is the origin of roomID's log in the deployment whose origin
// is deployment: deployment + "/room/" + the room id without its "room:"
// prefix, percent-encoded (RFC 3986) so that only [A-Za-z0-9_~-] stand for
// themselves and every other byte ('+', '/', ':', '.', '%', non-ASCII) is
// '%' and two upper-case hex digits. The encoding is injective, so the
// origin names the room uniquely, and it holds nothing an origin or key
// name forbids (C2SP tlog-checkpoint, signed-note); the same segment names
// the room in tile URLs ('.' is encoded so no segment is a dot segment).
// The result is also the key name of the room's checkpoints.
func RoomOrigin(deployment, roomID string) string {
	return deployment + roomSegment + RoomSegment(roomID)
}

// RoomSegment is the percent-encoded room id RoomOrigin appends.
func RoomSegment(roomID string) string {
	id := strings.TrimPrefix(roomID, roomIDPrefix)
	var b strings.Builder
	b.Grow(len(id))
	for i := 0; i < len(id); i++ {
		c := id[i]
		if segmentByte(c) {
			b.WriteByte(c)
			continue
		}
		const hexDigits = "0123456789ABCDEF"
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&0xf])
	}
	return b.String()
}

// ParseRoomSegment reverses RoomSegment: it returns the room id (with its
// "room:" prefix) and false for a segment RoomSegment cannot have written
// (a byte that should have been encoded, a lower-case or malformed escape,
// an escape of a byte that stands for itself, or invalid UTF-8).
func ParseRoomSegment(seg string) (string, bool) {
	if seg == "" {
		return "", false
	}
	var b strings.Builder
	b.WriteString(roomIDPrefix)
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if segmentByte(c) {
			b.WriteByte(c)
			continue
		}
		if c != '%' || i+2 >= len(seg) {
			return "", false
		}
		hi, ok1 := upperHex(seg[i+1])
		lo, ok2 := upperHex(seg[i+2])
		v := hi<<4 | lo
		if !ok1 || !ok2 || segmentByte(v) {
			return "", false
		}
		b.WriteByte(v)
		i += 2
	}
	id := b.String()
	if !utf8.ValidString(id) {
		return "", false
	}
	return id, true
}

// RoomOfOrigin returns the room id a room origin names and the deployment
// origin before it, or false when origin is no room origin (no "/room/"
// segment, or a segment ParseRoomSegment refuses).
func RoomOfOrigin(origin string) (roomID, deployment string, ok bool) {
	i := strings.LastIndex(origin, roomSegment)
	if i <= 0 {
		return "", "", false
	}
	roomID, ok = ParseRoomSegment(origin[i+len(roomSegment):])
	if !ok {
		return "", "", false
	}
	return roomID, origin[:i], true
}

func segmentByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '~'
}

func upperHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
