package main

import (
	"fmt"
	"io"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/config"
	"github.com/roompub/roompub/validate"
)

// open is what every subcommand needs: a connection, JetStream and a
// validator that checks host trust. With no --trusted-host it says on
// warn that every execution record will be set aside (untrusted_host): a
// reader trusts no host it was not told to, and a room whose records all
// land aside for that reason should not surprise anyone.
func open(c *config.Reader, name string, warn io.Writer) (*nats.Conn, jetstream.JetStream, *validate.Validator, error) {
	if len(c.TrustedHosts) == 0 {
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
		if err := validate.CheckRoomID(r); err != nil {
			return fmt.Errorf("%w: --room %q: %v", config.ErrInvalid, r, err)
		}
	}
	return nil
}
