package node

import (
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/roompub/roompub/room/embedded"
)

// OnStore starts the embedded server on the store directory o.StoreDir
// without serving anything (no stream is created, checked or marked), runs
// f on a connection to it, and shuts the server down: how publisher backup
// and restore reach the store of an embedded deployment while serve is
// stopped (docs/operations.md, "Backup and restore"). The store's lock
// makes it fail while a serve holds the store. o.Listen defaults to a free
// loopback port. It returns f's error, or why the server did not start.
func OnStore(o embedded.Options, f func(*nats.Conn) error) error {
	if o.Listen == "" {
		o.Listen = "127.0.0.1:-1"
	}
	srv, err := embedded.Start(o)
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL(), nats.Name("roompub-publisher-store"))
	if err != nil {
		return fmt.Errorf("connect to the embedded server on %s: %w", o.StoreDir, err)
	}
	defer nc.Close()
	return f(nc)
}
