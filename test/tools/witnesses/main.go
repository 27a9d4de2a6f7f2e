// Command witnesses runs real litewitness processes (internal/witnesstest:
// torchwood's litewitness, keys in an ssh-agent served from this process)
// for a deployment log until it is interrupted, and writes the C2SP
// tlog-policy file naming them: what `make run` cosigns with.
//
//	go run ./test/tools/witnesses --n 3 --quorum 2 --origin evidence.example.org/roompub \
//	    --publisher-id node:did:key:z6Mk… --policy witnesses.policy
//
// It prints "witnesses: ready" once every witness answers. SIGUSR1 stops
// the second witness (a witness down), SIGUSR2 starts it again.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"golang.org/x/mod/sumdb/note"

	"github.com/roompub/roompub/events"
	"github.com/roompub/roompub/internal/witnesstest"
)

func main() {
	n := flag.Int("n", 3, "witnesses to run")
	quorum := flag.Int("quorum", 2, "the policy's quorum")
	origin := flag.String("origin", "", "the deployment's origin")
	id := flag.String("publisher-id", "", "the publisher key's node id (signs the deployment log)")
	policy := flag.String("policy", "", "write the tlog-policy file here")
	flag.Parse()
	if err := run(*n, *quorum, *origin, *id, *policy); err != nil {
		fmt.Fprintln(os.Stderr, "witnesses:", err)
		os.Exit(1)
	}
}

func run(n, quorum int, origin, id, policy string) error {
	pub, err := events.ParseNodeID(id)
	if err != nil {
		return err
	}
	logKey, err := note.NewEd25519VerifierKey(origin, pub)
	if err != nil {
		return err
	}
	g, err := witnesstest.Launch(n, witnesstest.Log{Origin: origin, VKey: logKey})
	if err != nil {
		return err
	}
	defer g.Close()
	text := "log " + logKey + "\n"
	var names []string
	for _, w := range g.Witnesses {
		text += fmt.Sprintf("witness %s %s %s\n", w.Name, w.VKey, w.URL)
		names = append(names, w.Name)
	}
	group := fmt.Sprintf("%d-of-%d", quorum, n)
	text += fmt.Sprintf("group %s %d %s\nquorum %s\n", group, quorum, strings.Join(names, " "), group)
	if err := os.WriteFile(policy, []byte(text), 0o644); err != nil {
		return err
	}
	fmt.Println("witnesses: ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGUSR1, syscall.SIGUSR2)
	for s := range sig {
		switch s {
		case syscall.SIGUSR1:
			g.Witnesses[1].Stop()
			fmt.Println("witnesses: " + g.Witnesses[1].Name + " stopped")
		case syscall.SIGUSR2:
			g.Witnesses[1].Start()
			fmt.Println("witnesses: " + g.Witnesses[1].Name + " started")
		default:
			return nil
		}
	}
	return nil
}
