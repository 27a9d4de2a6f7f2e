package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/config"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/backup"
	"github.com/roompub/roompub/room/embedded"
	"github.com/roompub/roompub/room/node"
)

// storeFlag is backup's and restore's way to an embedded deployment's
// store while serve is stopped: the embedded server started on it alone
// (node.OnStore), instead of --server.
type storeFlag struct {
	StoreDir string `name:"store-dir" help:"Instead of --server: the embedded server's store directory (serve's --store-dir), with serve stopped; the embedded server is started on it for this command only." placeholder:"DIR" type:"path" yaml:"store-dir"`
}

// with runs f on a connection: to the embedded server on --store-dir when
// given, else to --server. copyDir is node.StoreOptions.CopyDir: set for a
// command that only reads the store.
func (s storeFlag) with(c *config.Client, name, copyDir string, f func(*nats.Conn) error) (node.StoreRun, error) {
	if s.StoreDir != "" {
		return node.OnStore(node.StoreOptions{Server: embedded.Options{StoreDir: s.StoreDir}, CopyDir: copyDir}, f)
	}
	nc, err := c.Connect(name)
	if err != nil {
		return node.StoreRun{}, err
	}
	defer nc.Close()
	return node.StoreRun{}, f(nc)
}

// backupCmd is `publisher backup`: a snapshot of one stream into a
// directory (room/backup; docs/operations.md, "Backup and restore").
type backupCmd struct {
	config.Client
	storeFlag
	Stream string `name:"stream" help:"The stream to back up: the room stream, or the deployment log ROOMPUB_DEPLOYMENT." default:"ROOMS" yaml:"stream"`
	JSON   bool   `name:"json" help:"Print the result as one JSON object."`
	Dir    string `arg:"" name:"dir" help:"Directory to write the backup into (created; must not hold a finished backup)." type:"path"`
}

func (c *backupCmd) Run(s *streams) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var mark *room.StreamMark
	if c.StoreDir != "" {
		var err error
		if mark, err = room.ReadStreamMarkFile(room.StreamMarkFile(c.StoreDir, c.Stream)); err != nil {
			return err
		}
	}
	var rep backupReport
	// A copy of the store goes beside the backup, on the file system the
	// operator chose for it, not in $TMPDIR (often a small tmpfs).
	run, err := c.with(&c.Client, "roompub-publisher-backup", filepath.Dir(c.Dir), func(nc *nats.Conn) (err error) {
		if rep.Result, err = backup.Backup(ctx, nc, c.Stream, c.Dir); err != nil {
			return err
		}
		rep.Loss, err = backup.CheckLoss(ctx, nc, c.Stream, mark)
		return err
	})
	if err != nil {
		return err
	}
	rep.Rebuilt = run.Stale
	if run.Copy == "" {
		rep.Rebuilt = nil
	}
	for _, b := range run.Cut {
		if b.Stream == c.Stream {
			rep.Cut = append(rep.Cut, b)
		}
	}
	verb := "BACKED UP"
	if rep.incomplete() {
		verb = "INCOMPLETE"
	}
	if err := printBackup(s.out, verb, rep, c.JSON); err != nil {
		return err
	}
	if rep.incomplete() {
		return incompleteError{stream: c.Stream, dir: c.Dir}
	}
	return nil
}

// backupReport is what publisher backup prints: the backup, and what the
// stream lacks of what it held.
type backupReport struct {
	backup.Result
	// Loss is what the stream lacks that its mark or its own state say it
	// held (backup.CheckLoss).
	Loss *backup.Loss `json:"loss,omitempty"`
	// Rebuilt are the streams whose state the embedded server rebuilt,
	// on a copy of the store (node.StaleStates).
	Rebuilt []node.StaleState `json:"rebuilt,omitempty"`
	// Cut are the stream's block files the server cut rebuilding its
	// state: on the copy; the store itself still holds them whole.
	Cut []node.CutBlock `json:"cut_blocks,omitempty"`
}

func (r backupReport) incomplete() bool { return r.Loss != nil || len(r.Cut) > 0 }

// incompleteError is backup's error when the stream lacks messages it
// held: the backup is written (of what is left), and the status is
// exitRefused.
type incompleteError struct{ stream, dir string }

func (e incompleteError) Error() string {
	return fmt.Sprintf("backup incomplete: stream %s lacks messages it held (above); %s holds what is left", e.stream, e.dir)
}

func (incompleteError) Unwrap() error { return errRefused }

// restoreCmd is `publisher restore`: a backup directory restored under
// its stream's name, never over an existing stream.
type restoreCmd struct {
	config.Client
	storeFlag
	Prefix           string `name:"subject-prefix" help:"First token of every room subject: a restored room stream must carry them." default:"rooms" yaml:"subject-prefix"`
	DeploymentStream string `name:"deployment-stream" help:"The deployment log's stream: a backup of it is checked against its own subjects." default:"ROOMPUB_DEPLOYMENT" yaml:"deployment-stream"`
	JSON             bool   `name:"json" help:"Print the result as one JSON object."`
	Dir              string `arg:"" name:"dir" help:"Directory holding a backup written by publisher backup or nats stream backup." type:"existingdir"`
}

func (c *restoreCmd) Run(s *streams) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o := backup.RestoreOptions{Subjects: room.Subjects{Prefix: c.Prefix}, Deployment: room.DeploymentLog{Stream: c.DeploymentStream}}
	var rep backupReport
	_, err := c.with(&c.Client, "roompub-publisher-restore", "", func(nc *nats.Conn) (err error) {
		rep.Result, err = backup.Restore(ctx, nc, c.Dir, o)
		return err
	})
	if err != nil {
		return err
	}
	return printBackup(s.out, "RESTORED", rep, c.JSON)
}

// printBackup prints what a backup or restore did, as text or JSON: a
// line, then, indented, what the stream lacks and what the server rebuilt.
func printBackup(w io.Writer, verb string, rep backupReport, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(rep)
	}
	r := rep.Result
	last := "no message"
	if !r.Taken.IsZero() {
		last = "last message at " + r.Taken.UTC().Format(time.RFC3339)
	}
	beyond := ""
	if r.Beyond > 0 {
		beyond = fmt.Sprintf(" (%d appended while the backup was taken, beyond what it recorded)", r.Beyond)
	}
	lines := []string{fmt.Sprintf("%-10s stream %s: %d messages%s, seqs %d to %d, %d bytes, %s; %s",
		verb, r.Stream, r.Messages, beyond, r.FirstSeq, r.LastSeq, r.Bytes, last, r.Dir)}
	const indent = "           "
	if rep.Loss != nil {
		for _, l := range rep.Loss.Lines() {
			lines = append(lines, indent+l)
		}
	}
	for _, b := range rep.Cut {
		lines = append(lines, fmt.Sprintf("%s%s by the server's rebuild, on the copy: its messages from byte %d on are missing", indent, b, b.Left))
	}
	for _, st := range rep.Rebuilt {
		lines = append(lines, indent+st.String()+"; the server rebuilt its state on a copy of the store, which is unchanged")
	}
	_, err := fmt.Fprintln(w, strings.Join(lines, "\n"))
	return err
}
