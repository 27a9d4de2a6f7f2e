package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
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
// given, else to --server.
func (s storeFlag) with(c *config.Client, name string, f func(*nats.Conn) error) error {
	if s.StoreDir != "" {
		return node.OnStore(embedded.Options{StoreDir: s.StoreDir}, f)
	}
	nc, err := c.Connect(name)
	if err != nil {
		return err
	}
	defer nc.Close()
	return f(nc)
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
	var res backup.Result
	err := c.with(&c.Client, "roompub-publisher-backup", func(nc *nats.Conn) (err error) {
		res, err = backup.Backup(ctx, nc, c.Stream, c.Dir)
		return err
	})
	if err != nil {
		return err
	}
	return printBackup(s.out, "BACKED UP", res, c.JSON)
}

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
	var res backup.Result
	err := c.with(&c.Client, "roompub-publisher-restore", func(nc *nats.Conn) (err error) {
		res, err = backup.Restore(ctx, nc, c.Dir, o)
		return err
	})
	if err != nil {
		return err
	}
	return printBackup(s.out, "RESTORED", res, c.JSON)
}

// printBackup prints what a backup or restore did, as text or JSON.
func printBackup(w io.Writer, verb string, r backup.Result, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(r)
	}
	last := "no message"
	if !r.Taken.IsZero() {
		last = "last message at " + r.Taken.UTC().Format(time.RFC3339)
	}
	beyond := ""
	if r.Beyond > 0 {
		beyond = fmt.Sprintf(" (%d appended while the backup was taken, beyond what it recorded)", r.Beyond)
	}
	_, err := fmt.Fprintf(w, "%-10s stream %s: %d messages%s, seqs %d to %d, %d bytes, %s; %s\n",
		verb, r.Stream, r.Messages, beyond, r.FirstSeq, r.LastSeq, r.Bytes, last, r.Dir)
	return err
}
