package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/roompub/roompub/config"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/reader"
	"github.com/roompub/roompub/validate"
)

type evidenceCmd struct {
	config.Reader
	config.Replay
	publisherTrust
	Instance string `name:"instance" required:"" placeholder:"ENV_REF" help:"The instance (environment/ref) whose verified records to print."`
	Room     string `name:"room" placeholder:"ROOM" help:"Only this room."`
	JSON     bool   `name:"json" help:"Print one JSON object per record."`
}

func (c *evidenceCmd) Validate() error {
	if err := validate.CheckEnvironmentRef(c.Instance); err != nil {
		return fmt.Errorf("%w: --instance %v", config.ErrInvalid, err)
	}
	if c.Room != "" {
		if err := checkRooms([]string{c.Room}); err != nil {
			return err
		}
	}
	return c.publisherTrust.validate()
}

func (c *evidenceCmd) Run(s *streams) error {
	t, err := c.trust()
	if err != nil {
		return err
	}
	nc, js, v, err := open(&c.Reader, "roompub-subscriber-evidence", s.err)
	if err != nil {
		return err
	}
	defer nc.Close()
	place, err := reader.OpenLayout(context.Background(), js, room.Layout{Stream: c.Stream, Subjects: room.Subjects{Prefix: c.Prefix}})
	if err != nil {
		return err
	}
	rep, err := reader.InstanceEvidence(context.Background(), nc, js, reader.EvidenceOptions{Instance: c.Instance, Room: c.Room,
		Audit: reader.AuditOptions{Validator: v, Trust: t, Read: c.ReadMode(c.Credentials)}}, place)
	if err != nil {
		return err
	}
	recs := rep.Records
	for _, r := range recs {
		if c.JSON {
			b, _ := json.Marshal(r)
			fmt.Fprintf(s.out, "%s\n", b)
			continue
		}
		fmt.Fprintf(s.out, "%s %s (%s) at stream seq %d: outcome %s, run %s\n", r.RoomID, r.Ref, r.Digest, r.StreamSeq, r.Outcome, r.RunRef)
		for _, it := range r.Evidence {
			fmt.Fprintf(s.out, "  %s %s %s\n", it.StepID, it.ArtifactRef, it.Digest)
		}
	}
	// On stderr, with --json too: stdout stays one record per line.
	fmt.Fprintf(s.err, "subscriber: %d verified record(s) observed on %s; %d message(s) of the room(s) set aside%s\n", len(recs), c.Instance, rep.SetAside, codeCounts(rep.ByCode))
	if rep.EmptyOn != "" {
		// Most often a mistyped --room: say so (audit calls such a room
		// EMPTY); an instance with no record is an answer (exit 0).
		fmt.Fprintf(s.err, "subscriber: %s holds no message on stream %s: is --room right?\n", c.Room, rep.EmptyOn)
	}
	return nil
}

// codeCounts is " (code n, code n)" for the set-aside counts by code, in
// code order; "" when there are none.
func codeCounts(byCode map[events.Code]uint64) string {
	if len(byCode) == 0 {
		return ""
	}
	codes := slices.Sorted(maps.Keys(byCode))
	parts := make([]string, len(codes))
	for i, c := range codes {
		parts[i] = fmt.Sprintf("%s %d", c, byCode[c])
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
