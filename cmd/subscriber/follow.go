package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/roompub/roompub/config"
	"github.com/roompub/roompub/room/reader"
)

type followCmd struct {
	config.Reader
	publisherTrust
	config.WitnessPolicy
	Rooms     []string `name:"room" required:"" placeholder:"ROOM" help:"Room to follow (repeatable)."`
	Durable   string   `name:"durable" required:"" placeholder:"NAME" help:"Durable consumer name: where this subscriber resumes after a restart."`
	JSON      bool     `name:"json" help:"Print events as JSON lines (the default; kept for symmetry with the other commands)." default:"true" negatable:""`
	StateDir  string   `name:"state-dir" help:"Directory of the subscriber's state: with --trusted-publisher, the last checkpoint verified per room (a room whose newest checkpoint is smaller or not consistent with it is refused as rolled back or forked). Default $XDG_STATE_HOME/roompub, else ~/.local/state/roompub; one directory per deployment (a kept checkpoint signed by a key not trusted, or of another --origin, is ignored and left in place). The set-aside list <durable>.set-aside.ndjson is kept there too." placeholder:"DIR" yaml:"state-dir"`
	Reexamine bool     `name:"reexamine" help:"Before following, decide again, with this run's --trusted-host, --trusted-publisher and --schema-dir, the messages the set-aside list holds (set aside and acknowledged, so never delivered again): print those that pass now, marked \"reexamined\", in stream order, and keep the rest listed." yaml:"reexamine"`
}

func (c *followCmd) Validate() error {
	if err := checkRooms(c.Rooms); err != nil {
		return err
	}
	if strings.ContainsAny(c.Durable, " \t.*>/\\") {
		return fmt.Errorf("%w: --durable %q is not a valid consumer name", config.ErrInvalid, c.Durable)
	}
	return errors.Join(c.publisherTrust.validate(), c.WitnessPolicy.Validate(len(c.TrustedPublishers)))
}

func (c *followCmd) Run(s *streams) error {
	t, err := c.trust()
	if err != nil {
		return err
	}
	witnessing, t, err := c.Policy(t)
	if err != nil {
		return err
	}
	dir, err := stateDir(c.StateDir)
	if err != nil {
		return err
	}
	state, err := checkpointState(t, dir)
	if err != nil {
		return err
	}
	nc, js, v, err := open(&c.Reader, "roompub-subscriber-follow", s.err)
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	list := &reader.SetAsideList{Path: filepath.Join(dir, c.Durable+".set-aside.ndjson")}
	enc := json.NewEncoder(s.out)
	stream, subjects, err := partitionOf(ctx, js, &c.Reader, s.err, c.Rooms...)
	if err != nil {
		return err
	}
	return reader.Follow(ctx, js, reader.FollowOptions{
		Stream: stream, Subjects: subjects, Rooms: c.Rooms, Durable: c.Durable, Validator: v,
		Trust: t, State: state, Read: config.FollowRead(c.Credentials), SetAsideList: list, Reexamine: c.Reexamine,
		Witnessing: witnessing,
		// What follow warns of (a fetch that fails, a message served
		// before set aside now) goes to stderr with the lines below; it
		// went nowhere, so a follower stuck on one message said nothing.
		Logger: warnLogger(s.err),
		OnWitnessQuorum: func(why string) {
			if why == "" {
				fmt.Fprintf(s.err, "subscriber: the deployment log is witnessed again\n")
				return
			}
			fmt.Fprintf(s.err, "subscriber: witness_quorum: %s\n", why)
		},
		OnResync: func(why string) {
			fmt.Fprintf(s.err, "subscriber: resync: %s\n", why)
		},
		OnSetAside: func(a reader.SetAside) {
			if a.Reexamined {
				fmt.Fprintf(s.err, "still set aside (re-examined): %s\n", a.Error())
				return
			}
			fmt.Fprintf(s.err, "set aside: %s\n", a.Error())
		},
		Ready: func(floor uint64) {
			fmt.Fprintf(s.err, "subscriber: following %s as %s (resumed after stream seq %d; set-aside list %s; %s)\n",
				strings.Join(c.Rooms, ", "), c.Durable, floor, list.Path, attestationNote(t))
			if note := listNote(list.Facts(), c.Reexamine); note != "" {
				fmt.Fprintf(s.err, "subscriber: %s\n", note)
			}
		},
	}, func(_ context.Context, ev *reader.Event) error {
		if c.JSON {
			return enc.Encode(ev)
		}
		again := ""
		if ev.Reexamined {
			again = " (re-examined)"
		}
		_, err := fmt.Fprintf(s.out, "%s %s seq %d %s%s%s\n", ev.RoomID, ev.Kind, ev.Seq, ev.EntryHash, ev.Ref, again)
		return err
	})
}

// listNote says, for people, what the rebuild made of the set-aside list:
// "" when there is nothing to say.
func listNote(f reader.ListFacts, reexamine bool) string {
	var parts []string
	if reexamine {
		parts = append(parts, fmt.Sprintf("re-examined %d listed message(s): %d served, %d still set aside", f.Listed, f.Served, f.Aside))
	}
	if f.PassNow > 0 {
		parts = append(parts, fmt.Sprintf("%d listed message(s) pass now and stay set aside: --reexamine serves them, and listed messages that wait on them may pass too", f.PassNow))
	}
	if f.ServedNowAside > 0 {
		parts = append(parts, fmt.Sprintf("%d message(s) served before are set aside now ('subscriber audit' names them)", f.ServedNowAside))
	}
	return strings.Join(parts, "; ")
}

// warnLogger writes a library's warnings to w as the command's other
// stderr lines read, one a line without a time: "warn: subscriber: fetch:
// {"error": "…"}".
func warnLogger(w io.Writer) *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = ""
	enc.ConsoleSeparator = ": "
	return zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.AddSync(w), zapcore.WarnLevel)).Named("subscriber")
}
