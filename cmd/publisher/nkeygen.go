package main

import (
	"fmt"

	"github.com/nats-io/nkeys"
)

type nkeygenCmd struct {
	Out   string `name:"out" required:"" placeholder:"FILE" help:"File to write the user nkey seed to (mode 0600)."`
	Force bool   `name:"force" help:"Replace FILE if it exists."`
}

// Run writes a new user nkey seed and prints its public key, the value a
// secure config's nkey names.
func (c *nkeygenCmd) Run(s *streams) error {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return err
	}
	defer kp.Wipe()
	seed, err := kp.Seed()
	if err != nil {
		return err
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return err
	}
	if err := writeSecretFile(c.Out, append(seed, '\n'), c.Force); err != nil {
		return err
	}
	_, err = fmt.Fprintln(s.out, pub)
	return err
}
