package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/validate"
)

type verifyCmd struct {
	JSON         bool     `name:"json" help:"Print one JSON object per PATH per line instead of text."`
	SchemaDir    string   `name:"schema-dir" type:"existingdir" placeholder:"DIR" help:"Validate against the schema files in DIR (flat, by file name) instead of the embedded ones."`
	TrustedHosts []string `name:"trusted-host" sep:"none" placeholder:"NODE_ID" help:"Accept execution records only from this host/node-id (node:did:key:z6Mk...); repeat for more hosts. Without it host trust is not checked."`
	Paths        []string `arg:"" name:"path" help:"Capsule directory (capsule.json + journal.ndjson), journal file or execution record file."`
}

// validatorOptions builds the validator's options from the flags.
func (c *verifyCmd) validatorOptions() []validate.Option {
	var opts []validate.Option
	if c.SchemaDir != "" {
		opts = append(opts, validate.WithSchemaFS(os.DirFS(c.SchemaDir)))
	}
	if len(c.TrustedHosts) > 0 {
		opts = append(opts, validate.WithTrustedHosts(c.TrustedHosts...))
	}
	return opts
}

func (c *verifyCmd) Run(s *streams) error {
	if os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(verifyGCPercent))
	}
	v, err := validate.New(c.validatorOptions()...)
	if err != nil {
		return err
	}
	w := textReport
	if c.JSON {
		w = jsonReport
	}
	return verifyPaths(v, c.Paths, s, w)
}

// verifyGCPercent is verify's GOGC unless the environment sets one. A
// journal is verified through a few batches of lines in flight, reused
// once linked, so a valid one allocates little after its first batches;
// a journal with problems keeps its faulty batches and the general path
// allocates per line, and there the collector ran about every 4 MB at the
// default 100. At 400 the peak heap stays bounded (about 80 MB on two
// cores, whatever the journal's length).
const verifyGCPercent = 400

// reportWriter prints the outcome of one path; err is VerifyPath's error
// (the path could not be verified at all).
type reportWriter func(out io.Writer, rep validate.Report, err error) error

// verifyPaths verifies the paths, up to GOMAXPROCS at once, and prints
// each outcome in the order of paths with write, and each usage error on
// stderr. It returns an error wrapping errUnverifiable when some path could
// not be verified, else one wrapping errRefused when some path was
// refused, else nil.
func verifyPaths(v *validate.Validator, paths []string, s *streams, write reportWriter) error {
	outcomes := verifyInParallel(v, paths, runtime.GOMAXPROCS(0))
	defer outcomes.stop()
	var unusable, refused int
	for i := range paths {
		rep, err := outcomes.wait(i)
		switch {
		case err != nil:
			unusable++
			fmt.Fprintf(s.err, "publisher: %v\n", err)
		case !rep.OK:
			refused++
		}
		if werr := write(s.out, rep, err); werr != nil {
			return fmt.Errorf("write report: %w", werr)
		}
	}
	noun := "paths"
	if len(paths) == 1 {
		noun = "path"
	}
	switch {
	case unusable > 0:
		return fmt.Errorf("%d of %d %s %w", unusable, len(paths), noun, errUnverifiable)
	case refused > 0:
		return fmt.Errorf("%d of %d %s %w", refused, len(paths), noun, errRefused)
	}
	return nil
}

// pathOutcomes are the results of VerifyPath for a list of paths, filled
// in by goroutines; wait(i) blocks until path i is done.
type pathOutcomes struct {
	reps []validate.Report
	errs []error
	done []chan struct{}
	quit chan struct{}
}

// verifyInParallel starts verifying paths, at most n at a time, in order
// of the list (so the first results come first).
func verifyInParallel(v *validate.Validator, paths []string, n int) *pathOutcomes {
	o := &pathOutcomes{
		reps: make([]validate.Report, len(paths)),
		errs: make([]error, len(paths)),
		done: make([]chan struct{}, len(paths)),
		quit: make(chan struct{}),
	}
	for i := range o.done {
		o.done[i] = make(chan struct{})
	}
	slots := make(chan struct{}, max(n, 1))
	go func() {
		for i, p := range paths {
			select {
			case slots <- struct{}{}:
			case <-o.quit:
				return
			}
			go func() {
				defer func() { <-slots }()
				o.reps[i], o.errs[i] = v.VerifyPath(p)
				close(o.done[i])
			}()
		}
	}()
	return o
}

func (o *pathOutcomes) wait(i int) (validate.Report, error) {
	<-o.done[i]
	return o.reps[i], o.errs[i]
}

// stop starts no further paths; those running finish on their own.
func (o *pathOutcomes) stop() { close(o.quit) }

// jsonLine is one line of verify --json: the report, and for a path that
// could not be verified, the error.
type jsonLine struct {
	validate.Report
	Error string `json:"error,omitempty"`
}

// jsonReport writes rep as one JSON object on one line. A path that could
// not be verified gets a line too, with ok false and an "error" member.
func jsonReport(out io.Writer, rep validate.Report, err error) error {
	line := jsonLine{Report: rep}
	if err != nil {
		line.OK = false
		line.Error = err.Error()
	}
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	return enc.Encode(line)
}

// textReport writes rep as one readable line, with the refusal's further
// problems indented below it. Usage errors go to stderr only (verifyPaths),
// so nothing is written for them here.
func textReport(out io.Writer, rep validate.Report, err error) error {
	if err != nil {
		return nil
	}
	var b strings.Builder
	if rep.OK {
		fmt.Fprintf(&b, "%-7s %-9s %s  %s\n", "ok", rep.Kind, rep.Path, summary(rep))
	} else {
		problems := rep.Problems
		if len(problems) == 0 { // not from validate, which lists every refusal's problems
			problems = []events.Problem{{Code: rep.Code, Reason: rep.Reason}}
		}
		fmt.Fprintf(&b, "%-7s %-9s %s: %s\n", "REFUSED", rep.Kind, rep.Path, problems[0])
		indent := strings.Repeat(" ", 8)
		for _, p := range problems[1:] {
			fmt.Fprintf(&b, "%s%s\n", indent, p)
		}
		if rep.Omitted > 0 {
			fmt.Fprintf(&b, "%s... and %d more problem(s)\n", indent, rep.Omitted)
		}
	}
	_, werr := io.WriteString(out, b.String())
	return werr
}

// summary describes an accepted input: a journal's length and head, a
// record's ref.
func summary(rep validate.Report) string {
	switch rep.Kind {
	case validate.KindJournal:
		n := 0
		if rep.Entries != nil {
			n = *rep.Entries
		}
		return fmt.Sprintf("%d entries, head %s", n, abbrev(rep.Head, 16))
	case validate.KindExecution:
		return "ref " + events.ExecutionRefPrefix + abbrev(strings.TrimPrefix(rep.Ref, events.ExecutionRefPrefix), 16)
	}
	return ""
}

// abbrev cuts s to n bytes followed by "…"; --json prints the full value.
func abbrev(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
