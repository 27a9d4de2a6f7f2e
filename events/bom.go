package events

import "bytes"

// utf8BOM is U+FEFF encoded in UTF-8, as editors put it at a file's start.
var utf8BOM = []byte{0xef, 0xbb, 0xbf}

// HasBOM reports whether b starts with a UTF-8 byte order mark (U+FEFF,
// bytes EF BB BF), which editors write at the start of a file saved
// "UTF-8 with BOM". No roompub input takes one, and no editor shows it,
// so a refusal of such input names it (BOMReason).
func HasBOM(b []byte) bool { return bytes.HasPrefix(b, utf8BOM) }

// BOMReason is the reason for refusing input that starts with a byte
// order mark: what ("the record") starts with it, and kind ("a record")
// is UTF-8 without one.
func BOMReason(what, kind string) string {
	return what + " starts with a UTF-8 byte order mark (bytes EF BB BF): " + kind + " is UTF-8 without one"
}
