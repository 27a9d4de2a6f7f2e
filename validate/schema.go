package validate

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlclark/regexp2/v2"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/schemas"
)

// ErrSchema is wrapped by New when a schema directory cannot be loaded or
// compiled.
var ErrSchema = errors.New("schema")

// defaultPatternTimeout bounds one regexp2 match of a pattern outside the
// linear class (pattern.go): only a custom schema directory can hold one.
// A match that runs out of it refuses the value (jsonschema's Regexp can
// only say "does not match"); schemaProblems then says so in the reason.
// Patterns in the linear class (all the embedded ones) run on Go's regexp
// and have no budget.
const defaultPatternTimeout = 250 * time.Millisecond

// ecmaEngine is the "pattern" keyword's engine of one schema set
// (jsonschema.RegexpEngine: compile): patterns of the linear class on Go's
// regexp, the others on regexp2, timeout per match.
type ecmaEngine struct {
	timeout time.Duration
	// backtracking maps the source of each compiled pattern outside the
	// linear class to its regexp2 form, for timedOut.
	backtracking sync.Map // string -> *regexp2.Regexp
}

// newECMAEngine returns an engine whose regexp2 matches run out after
// timeout (0: defaultPatternTimeout).
func newECMAEngine(timeout time.Duration) *ecmaEngine {
	if timeout <= 0 {
		timeout = defaultPatternTimeout
	}
	return &ecmaEngine{timeout: timeout}
}

// ecmaRegexp adapts regexp2 to jsonschema.Regexp. JSON Schema patterns are
// ECMA-262 regular expressions (draft 2020-12 §6.4, draft-07 §4.3): Go's
// RE2 differs, for example \s matches no Unicode space beyond ASCII there,
// so "room:a\u00a0b" would pass ^room:[^\s]+$.
type ecmaRegexp struct{ re *regexp2.Regexp }

func (r ecmaRegexp) MatchString(s string) bool {
	ok, err := r.re.MatchString(s)
	return err == nil && ok
}

func (r ecmaRegexp) String() string { return r.re.String() }

// linearRegexp is a pattern of the linear class (pattern.go) on Go's
// regexp or a seqMatcher: the same verdicts as regexp2, in linear time,
// with no budget.
type linearRegexp struct {
	re  linearMatcher
	src string // the ECMAScript source, for error messages
}

func (r linearRegexp) MatchString(s string) bool { return r.re.MatchString(s) }

func (r linearRegexp) String() string { return r.src }

// compile compiles a "pattern" keyword. regexp2 always parses it, so
// that the patterns refused stay those refused before the linear engine;
// a pattern of the linear class then runs on Go's regexp.
func (e *ecmaEngine) compile(expr string) (jsonschema.Regexp, error) {
	re, err := regexp2.Compile(expr, regexp2.ECMAScript|regexp2.Unicode)
	if err != nil {
		return nil, err
	}
	if lin, ok := compileLinear(expr); ok {
		return linearRegexp{re: lin, src: expr}, nil
	}
	re.MatchTimeout = e.timeout
	e.backtracking.Store(expr, re)
	return ecmaRegexp{re: re}, nil
}

// quoteSchema quotes s as jsonschema v6's messages do: Go quoting in
// single quotes, double quotes bare.
func quoteSchema(s string) string {
	q := strconv.Quote(s)
	q = strings.ReplaceAll(q, `\"`, `"`)
	q = strings.ReplaceAll(q, `'`, `\'`)
	return "'" + q[1:len(q)-1] + "'"
}

// timedOut reports whether a "pattern" failure of s against expr came from
// regexp2 running out of its timeout rather than from a real mismatch:
// it matches again (a match, or another timeout, proves the failure was a
// timeout, since a match is otherwise deterministic). Linear patterns never
// time out.
func (e *ecmaEngine) timedOut(expr, s string) bool {
	v, ok := e.backtracking.Load(expr)
	if !ok {
		return false
	}
	m, err := v.(*regexp2.Regexp).MatchString(s)
	return err != nil || m
}

// fileLoader resolves every schema URL to the file of that name (its last
// path or URN segment) in the first of fsys that has it, and makes that
// file's URL its base.
type fileLoader struct{ fsys []fs.FS }

func (l fileLoader) Load(url string) (any, error) {
	name := url
	if i := strings.IndexByte(name, '#'); i >= 0 {
		name = name[:i]
	}
	if i := strings.LastIndexAny(name, "/:"); i >= 0 {
		name = name[i+1:]
	}
	if name == "" || !fs.ValidPath(name) {
		return nil, fmt.Errorf("%w: cannot resolve %q to a file name", ErrSchema, url)
	}
	var data []byte
	var err error
	for _, fsys := range l.fsys {
		if data, err = fs.ReadFile(fsys, path.Clean(name)); !errors.Is(err, fs.ErrNotExist) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrSchema, name, err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrSchema, name, err)
	}
	// The upstream $id is a URN; as a base it makes the bare-file-name $refs
	// unresolvable. The file's own URL is the base instead (docs/design.md,
	// "Execution record").
	if m, ok := doc.(map[string]any); ok {
		if _, has := m["$id"]; has {
			m["$id"] = "file:///" + name
		}
	}
	return doc, nil
}

// compiledSchemas holds the two root schemas. The embedded ones are
// compiled when first needed (check): an entry or record the fast checks
// accept never needs them, and compiling took `publisher verify` 10 to 18
// ms before its first line. Those from a schema directory are compiled by
// New, which reports their errors.
type compiledSchemas struct {
	// fastEnvelope: the envelope schema is the embedded one, so
	// envelopeValid may stand in front of jsonschema.
	fastEnvelope bool
	// fastRecord: the record schema and every file it references are the
	// embedded ones, so recordShapeValid may stand in front of jsonschema.
	fastRecord bool
	// patterns compiled their "pattern" keywords.
	patterns *ecmaEngine

	compiler *jsonschema.Compiler
	once     sync.Once
	envelope *jsonschema.Schema
	record   *jsonschema.Schema
	err      error // wraps ErrSchema
}

// compileSchemas prepares the root schemas from fsys, taking any file fsys
// lacks from the embedded set (nil fsys: the embedded set alone, compiled
// on first use); patternTimeout is newECMAEngine's.
func compileSchemas(fsys fs.FS, patternTimeout time.Duration) (*compiledSchemas, error) {
	layers := []fs.FS{schemas.FS()}
	if fsys != nil {
		layers = []fs.FS{fsys, schemas.FS()}
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(fileLoader{fsys: layers})
	patterns := newECMAEngine(patternTimeout)
	c.UseRegexpEngine(patterns.compile)
	c.AssertFormat()
	out := &compiledSchemas{fastEnvelope: fastEnvelopeApplies(layers), fastRecord: fastRecordApplies(layers), patterns: patterns, compiler: c}
	if fsys != nil {
		return out, out.compile()
	}
	return out, nil
}

// compile compiles the root schemas, once.
func (cs *compiledSchemas) compile() error {
	cs.once.Do(func() {
		if cs.envelope, cs.err = cs.compiler.Compile("file:///" + schemas.EnvelopeFile); cs.err != nil {
			cs.err = fmt.Errorf("%w: %s: %v", ErrSchema, schemas.EnvelopeFile, cs.err)
			return
		}
		if cs.record, cs.err = cs.compiler.Compile("file:///" + schemas.RecordFile); cs.err != nil {
			cs.err = fmt.Errorf("%w: %s: %v", ErrSchema, schemas.RecordFile, cs.err)
		}
		cs.compiler = nil
	})
	return cs.err
}

// check validates inst against the record schema (record) or the
// envelope's, compiling them first if need be: schemaProblems, or the
// compile error as the one problem (the embedded schemas compile:
// TestEmbeddedSchemasCompile).
func (cs *compiledSchemas) check(record bool, inst any, code events.Code, at events.Location) []events.Problem {
	if err := cs.compile(); err != nil {
		return []events.Problem{{Code: code, At: at, Reason: err.Error()}}
	}
	sch := cs.envelope
	if record {
		sch = cs.record
	}
	return cs.patterns.schemaProblems(sch, inst, code, at)
}

var printer = message.NewPrinter(language.English)

// schemaProblems validates inst against sch, compiled with eng, and returns
// one problem per failing leaf keyword, located by JSON pointer.
func (eng *ecmaEngine) schemaProblems(sch *jsonschema.Schema, inst any, code events.Code, at events.Location) []events.Problem {
	err := sch.Validate(inst)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []events.Problem{{Code: code, At: at, Reason: err.Error()}}
	}
	var out []events.Problem
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		loc := at
		loc.Pointer = pointer(e.InstanceLocation)
		if ap, ok := e.ErrorKind.(*kind.AdditionalProperties); ok {
			sort.Strings(ap.Properties) // found in map order
		}
		reason := e.ErrorKind.LocalizedString(printer)
		if p, ok := e.ErrorKind.(*kind.Pattern); ok && eng.timedOut(p.Want, p.Got) {
			reason = fmt.Sprintf("%s could not be matched against pattern %s within %v (a backtracking pattern outside the linear class); refused",
				quoteSchema(p.Got), quoteSchema(p.Want), eng.timeout)
		}
		out = append(out, events.Problem{Code: code, At: loc,
			Reason: "schema: " + reason + " (" + keywordPath(e) + ")"})
	}
	walk(ve)
	// The validator walks the instance's members in Go map order; sort so
	// that the same bytes always get the same first problem and list.
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].At.Pointer != out[j].At.Pointer {
			return out[i].At.Pointer < out[j].At.Pointer
		}
		return out[i].Reason < out[j].Reason
	})
	return out
}

// pointerEscaper escapes one RFC 6901 reference token. Built once: building
// a strings.Replacer costs ~25 KB, and pointer runs for every payload key.
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// pointer renders a JSON pointer (RFC 6901) from its reference tokens.
func pointer(tokens []string) string {
	if len(tokens) == 0 {
		return "" // the whole document (RFC 6901); "/" would name the member ""
	}
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(pointerEscaper.Replace(t))
	}
	return b.String()
}

func keywordPath(e *jsonschema.ValidationError) string {
	kp := e.ErrorKind.KeywordPath()
	if len(kp) == 0 {
		return "schema"
	}
	return "keyword " + strings.Join(kp, "/")
}
