// Command splitview plays a publisher that shows one auditor a room other
// than the one in the stream: with the publisher key it signs a checkpoint
// of the room at the size of the room's latest checkpoint but with another
// root, and appends it to the deployment log as a new entry. The log stays
// consistent, so witnesses cosign it; a reader must refuse the room.
//
//	go run ./test/breakers/splitview nats://127.0.0.1:4222 publisher-key.pem evidence.example.org/roompub room:eval-csv
package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roompub/roompub/checkpoint"
	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/room"
)

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: splitview URL KEYFILE ORIGIN ROOM")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2], os.Args[3], os.Args[4]); err != nil {
		fmt.Fprintln(os.Stderr, "splitview:", err)
		os.Exit(1)
	}
}

func run(url, keyFile, origin, roomID string) error {
	pem, err := os.ReadFile(keyFile)
	if err != nil {
		return err
	}
	key, err := events.ParseHostKey(pem)
	if err != nil {
		return err
	}
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, room.DefaultStream)
	if err != nil {
		return err
	}
	last, err := st.GetLastMsgForSubject(ctx, room.Subjects{}.Checkpoint(roomID))
	if err != nil {
		return fmt.Errorf("the room's latest checkpoint: %w", err)
	}
	u, err := checkpoint.ParseUnverified(last.Data)
	if err != nil {
		return err
	}
	ro := checkpoint.RoomOrigin(origin, roomID)
	signer, err := checkpoint.NewNamedNoteSigner(key, ro)
	if err != nil {
		return err
	}
	forged, err := checkpoint.Sign(signer, ro, u.Size, sha256.Sum256([]byte("the room shown elsewhere")))
	if err != nil {
		return err
	}
	ack, err := js.Publish(ctx, room.DeploymentLog{}.Entry(), forged)
	if err != nil {
		return err
	}
	fmt.Printf("splitview: a checkpoint of %s at size %d with another root is entry stream seq %d of the deployment log\n", roomID, u.Size, ack.Sequence)
	return nil
}
