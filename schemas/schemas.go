// Package schemas embeds the JSON Schemas roompub validates against: the
// capsule envelope v1 (seed 000, draft-07, 31-key payload allowlist) and the
// task-pack execution record v1 with the four sibling files its $refs name
// (seed 004; the siblings are upstream excerpts holding only what is
// referenced). Files are found by name, never by $id: the upstream $ids are
// URNs while the $refs are bare file names (docs/design.md, "Execution
// record").
package schemas

import (
	"embed"
	"io/fs"
)

// File names of the two root schemas. A schema directory given in place of
// the embedded one must hold files of these names, and every file their
// $refs name.
const (
	EnvelopeFile = "capsule-envelope.schema.json"
	RecordFile   = "corpus-experiment-task-pack-execution.v1.schema.json"
)

//go:embed *.schema.json
var embedded embed.FS

// FS returns the embedded schema files, flat, by file name.
func FS() fs.FS { return embedded }
