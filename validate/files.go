package validate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/internal/regularfile"
)

// Kinds of input the offline verifier recognises, told from content.
const (
	KindJournal   = "journal"
	KindExecution = "execution"
)

// Capsule directory layout of the upstream harness.
const (
	JournalFile = "journal.ndjson"
	CapsuleFile = "capsule.json"
)

// ErrUsage is wrapped by VerifyPath for inputs that cannot be verified at
// all: a missing file, an unreadable directory, a directory without a
// journal. These are not refusals (exit 2, not 1).
var ErrUsage = errors.New("cannot verify")

// Report is the outcome of verifying one path, the shape of one line of
// `publisher verify --json`.
type Report struct {
	Path     string           `json:"path"`
	Kind     string           `json:"kind"`
	OK       bool             `json:"ok"`
	Code     events.Code      `json:"code,omitempty"`
	At       string           `json:"at,omitempty"`
	Reason   string           `json:"reason,omitempty"`
	Problems []events.Problem `json:"problems,omitempty"`
	Omitted  int              `json:"omitted,omitempty"`
	Entries  *int             `json:"entries,omitempty"` // journals: complete lines read
	Head     string           `json:"head,omitempty"`    // journals: entry_hash of the last entry of the valid prefix
	Ref      string           `json:"ref,omitempty"`     // records: execution/ref as computed
	Refusal  *events.Refusal  `json:"-"`
}

func (r *Report) refuse(err error) error {
	var ref *events.Refusal
	if !errors.As(err, &ref) {
		return err
	}
	r.OK = false
	r.Refusal = ref
	r.Code, r.At, r.Reason = ref.Code, ref.At.String(), ref.Reason
	r.Problems, r.Omitted = ref.Problems, ref.Omitted
	return nil
}

// VerifyPath verifies a capsule directory (capsule.json + journal.ndjson), a
// journal file or an execution record file; the kind of a file is told from
// its content (DetectKind), not its name, and an empty file (white space
// alone) is refused empty_input as neither (Kind ""). A refusal is
// reported in the Report (OK false); the error is non-nil only for inputs
// that cannot be verified at all, wrapping ErrUsage.
func (v *Validator) VerifyPath(path string) (rep Report, err error) {
	rep = Report{Path: path, OK: true}
	defer func() {
		if err != nil {
			rep.OK = false // not verified is not valid
		}
	}()
	info, err := os.Stat(path)
	if err != nil {
		return rep, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if info.IsDir() {
		rep.Kind = KindJournal
		return rep, v.verifyCapsuleDir(path, &rep)
	}
	f, err := os.Open(path)
	if err != nil {
		return rep, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	defer f.Close()
	at := events.Location{File: path}
	if info.Size() > MaxRecordBytes {
		// Too big to be a record.
		head := make([]byte, 64<<10)
		n, _ := io.ReadFull(f, head)
		return rep, v.verifyBeyondRecord(&rep, path, head[:n], strconv.FormatInt(info.Size(), 10), func() (io.Reader, error) {
			_, err := f.Seek(0, io.SeekStart)
			return f, err
		})
	}
	// At most a record's worth: a pipe or a device reports no size, and
	// /dev/zero never ends (a breaker's verify of it grew without bound).
	data, err := io.ReadAll(io.LimitReader(f, MaxRecordBytes+1))
	if err != nil {
		return rep, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if len(data) > MaxRecordBytes {
		// More than a record from an input of no size.
		return rep, v.verifyBeyondRecord(&rep, path, data[:64<<10], "more than "+strconv.Itoa(MaxRecordBytes), func() (io.Reader, error) {
			return io.MultiReader(bytes.NewReader(data), f), nil
		})
	}
	if events.IsBlank(data) {
		// Nothing says which kind it is: neither is named.
		return rep, rep.refuse(events.NewRefusal([]events.Problem{{Code: events.EmptyInput, At: at,
			Reason: "the file is empty: it holds no journal entry and no execution record"}}))
	}
	rep.Kind = DetectKind(data)
	if rep.Kind == KindExecution {
		rec, err := v.Record(data, at)
		if rec != nil {
			rep.Ref = rec.ComputedRef()
		}
		return rep, rep.refuse(err)
	}
	return rep, v.verifyJournal(bytes.NewReader(data), path, nil, &rep)
}

// verifyBeyondRecord verifies an input larger than any record (size, in
// words, for the reason): refused too_large when head, its beginning, says
// it is a record; otherwise the journal that rest returns, streamed in
// bounded memory.
func (v *Validator) verifyBeyondRecord(rep *Report, path string, head []byte, size string, rest func() (io.Reader, error)) error {
	if looksLikeRecord(head) {
		rep.Kind = KindExecution
		return rep.refuse(events.NewRefusal([]events.Problem{{Code: events.TooLarge, At: events.Location{File: path},
			Reason: fmt.Sprintf("an execution record of %s bytes; at most %d are read", size, MaxRecordBytes)}}))
	}
	r, err := rest()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	rep.Kind = KindJournal
	return v.verifyJournal(r, path, nil, rep)
}

// MaxRecordBytes bounds an execution record file: the server's default
// max payload is 1 MiB, so a record is far smaller; a larger file is read
// as a journal (streamed) unless it starts like a record, which is then
// refused as too_large without being read whole.
const MaxRecordBytes = 8 << 20

// verifyCapsuleDir verifies dir as the upstream verifies a capsule: its
// journal first, then capsule.json, whose problems come after the chain's
// (events.VerifyCapsule).
func (v *Validator) verifyCapsuleDir(dir string, rep *Report) error {
	jpath := filepath.Join(dir, JournalFile)
	f, err := regularfile.Open(jpath)
	if err != nil {
		return fmt.Errorf("%w: %s is not a capsule directory: %v", ErrUsage, dir, err)
	}
	defer f.Close()
	c, err := ReadCapsule(dir)
	if err != nil {
		return err
	}
	res, err := events.VerifyCapsule(f, jpath, c, v.capsuleCheck(c.Meta))
	rep.Entries = &res.Entries
	rep.Head = res.Head
	return rep.refuse(err)
}

// ReadCapsule reads and checks DIR/capsule.json (events.CheckCapsule). A
// missing file is one invalid_capsule problem; an unreadable one is an
// error wrapping ErrUsage.
func ReadCapsule(dir string) (events.CapsuleFile, error) {
	cpath := filepath.Join(dir, CapsuleFile)
	raw, err := regularfile.ReadFile(cpath)
	if errors.Is(err, os.ErrNotExist) {
		return events.CapsuleFile{Problems: []events.Problem{{Code: events.InvalidCapsule,
			At: events.Location{File: cpath}, Reason: "the capsule directory has no capsule.json"}}}, nil
	}
	if err != nil {
		return events.CapsuleFile{}, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	return events.CheckCapsule(raw, cpath), nil
}

// ReadCapsuleMeta reads DIR/capsule.json for a writer that must not send a
// line of a capsule whose capsule.json is invalid: an invalid or missing
// file is an *events.Refusal (invalid_capsule, every problem listed); an
// unreadable one wraps ErrUsage.
func ReadCapsuleMeta(dir string) (events.CapsuleMeta, error) {
	c, err := ReadCapsule(dir)
	if err != nil {
		return events.CapsuleMeta{}, err
	}
	if ref := events.NewRefusal(c.Problems); ref != nil {
		return c.Meta, ref
	}
	return c.Meta, nil
}

func (v *Validator) verifyJournal(r io.Reader, file string, meta *events.CapsuleMeta, rep *Report) error {
	res, err := v.Journal(r, file, meta)
	rep.Entries = &res.Entries
	rep.Head = res.Head
	return rep.refuse(err)
}

// looksLikeRecord applies DetectKind's text rule to input that is not one
// JSON object, or to a file's beginning: no "schema" key (every journal
// line has one), and either the name "schema/v" or an object opened alone
// on the first line (a pretty-printed record cut short; a journal line is
// a whole object).
func looksLikeRecord(text []byte) bool {
	if bytes.Contains(text, []byte(`"schema":`)) {
		return false
	}
	first, _, _ := bytes.Cut(bytes.TrimLeft(text, jsonSpace), []byte("\n"))
	return bytes.Contains(text, []byte(`"schema/v"`)) || string(bytes.TrimRight(first, jsonSpace)) == "{"
}

// jsonSpace is JSON's white space (RFC 8259, section 2).
const jsonSpace = " \t\r\n"

// DetectKind tells an execution record from a journal by content
// (docs/cli.md, "publisher verify"). Input that is one JSON object is a
// record when it has a "schema/v" member, or when it has no "schema"
// member (every journal entry has one) and either a member whose name holds
// a "/" (as a record's do: "execution/ref", "host/node-id") or spans
// several lines (a journal entry is one line). One JSON value that is no
// object is a record when it spans several lines. Anything else is a record
// when looksLikeRecord says so, and otherwise (empty and unparseable input
// included) a journal, whose line checks then say what is wrong with it. A
// record is then refused as the gate refuses it: schema_invalid for one
// without "schema/v", malformed_json for one that is not strict JSON.
func DetectKind(data []byte) string {
	body := bytes.Trim(data, jsonSpace)
	multiLine := bytes.IndexByte(body, '\n') >= 0
	if len(body) > 0 && body[0] == '{' {
		// encoding/json, not events.DecodeObject: only the names matter
		// here, and a record that is not strict JSON (duplicate names, a
		// lone surrogate) is still a record, refused malformed_json.
		var obj map[string]json.RawMessage
		if json.Unmarshal(body, &obj) == nil {
			return objectKind(obj, multiLine)
		}
	} else if multiLine && json.Valid(body) {
		return KindExecution
	}
	if looksLikeRecord(data) {
		return KindExecution
	}
	return KindJournal
}

// objectKind is DetectKind's rule for one JSON object with members obj.
func objectKind(obj map[string]json.RawMessage, multiLine bool) string {
	if _, ok := obj["schema/v"]; ok {
		return KindExecution
	}
	if _, ok := obj["schema"]; ok {
		return KindJournal
	}
	if multiLine {
		return KindExecution
	}
	for name := range obj {
		if strings.Contains(name, "/") {
			return KindExecution
		}
	}
	return KindJournal
}
