package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/config"
	"github.com/roompub/roompub/room"
	"github.com/roompub/roompub/room/reader"
	"github.com/roompub/roompub/validate"
)

// open is what every subcommand needs: a connection, JetStream and a
// validator that checks host trust. With no --trusted-host it says on
// warn that every execution record will be set aside (untrusted_host): a
// reader trusts no host it was not told to, and a room whose records all
// land aside for that reason should not surprise anyone. A command that
// reads no record (prove and export of journal entries) passes a nil warn.
func open(c *config.Reader, name string, warn io.Writer) (*nats.Conn, jetstream.JetStream, *validate.Validator, error) {
	if len(c.TrustedHosts) == 0 && warn != nil {
		fmt.Fprintln(warn, "subscriber: no --trusted-host: every execution record will be set aside as untrusted_host (name the hosts whose signatures you trust)")
	}
	vopts := []validate.Option{validate.WithTrustedHosts(c.TrustedHosts...)}
	if c.SchemaDir != "" {
		vopts = append(vopts, validate.WithSchemaFS(os.DirFS(c.SchemaDir)))
	}
	v, err := validate.New(vopts...)
	if err != nil {
		return nil, nil, nil, err
	}
	nc, err := c.Connect(name)
	if err != nil {
		return nil, nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, nil, err
	}
	return nc, js, v, nil
}

func checkRooms(rooms []string) error {
	for _, r := range rooms {
		if err := validate.CheckRoomIDForm(r); err != nil {
			return fmt.Errorf("%w: --room %q: %v", config.ErrInvalid, r, err)
		}
	}
	return nil
}

// partitionOf is the room stream and subjects that hold rooms, all on one
// partition of the deployment (room.Placement.Locate; a deployment
// without a placement bucket is --stream alone). With no room, the
// deployment must have one partition. For the commands that read one
// room stream (follow, prove, export). With waiting (follow), a room not
// placed yet on a deployment of several partitions is waited for, saying
// so once on warn: a follower started before the room's first message
// would otherwise read the first partition, where the room may never be.
func partitionOf(ctx context.Context, js jetstream.JetStream, c *config.Reader, warn io.Writer, rooms ...string) (string, room.Subjects, error) {
	place, err := reader.OpenLayout(ctx, js, room.Layout{Stream: c.Stream, Subjects: room.Subjects{Prefix: c.Prefix}})
	if err != nil {
		return "", room.Subjects{}, err
	}
	parts := place.Partitions()
	if warn != nil && len(parts) > 1 {
		for _, id := range rooms {
			for said := false; ; {
				_, ok, err := place.Room(ctx, id)
				if err != nil {
					return "", room.Subjects{}, err
				}
				if ok {
					break
				}
				if !said {
					fmt.Fprintf(warn, "subscriber: %s is placed on no partition yet (it holds no message): waiting for it\n", id)
					said = true
				}
				select {
				case <-ctx.Done():
					return "", room.Subjects{}, ctx.Err()
				case <-time.After(time.Second):
				}
			}
		}
	}
	if len(rooms) == 0 {
		if len(parts) > 1 {
			return "", room.Subjects{}, fmt.Errorf("%w: the deployment places rooms over %d room streams: name the rooms (--room) to read, all on one of them", config.ErrInvalid, len(parts))
		}
		return parts[0].Stream, parts[0].Subjects, nil
	}
	var first room.Partition
	for i, id := range rooms {
		q, err := place.Locate(ctx, id)
		if err != nil {
			return "", room.Subjects{}, err
		}
		if i == 0 {
			first = q
		} else if q.Stream != first.Stream {
			return "", room.Subjects{}, fmt.Errorf("%w: %s is on room stream %s and %s on %s: one reader reads one room stream, so run one per stream", config.ErrInvalid, rooms[0], first.Stream, id, q.Stream)
		}
	}
	return first.Stream, first.Subjects, nil
}
