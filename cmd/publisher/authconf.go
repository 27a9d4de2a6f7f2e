package main

import (
	"fmt"
	"io"

	"github.com/roompub/roompub/config"
)

type authconfCmd struct {
	Account string `name:"account" placeholder:"NAME" help:"Put the users into this account (with JetStream enabled) instead of the default account's authorization block."`
	Stream  string `name:"stream" help:"Room stream name." default:"ROOMS"`
	Prefix  string `name:"subject-prefix" help:"First token of every room subject." default:"rooms"`
	// Partitions gives every room stream's permissions (room.Layout).
	Partitions int    `name:"partitions" help:"The deployment's room streams (serve --partitions, 1 to 64): the permissions name each." default:"1" placeholder:"N"`
	File       string `arg:"" name:"secure-config" help:"The secure config (YAML) serve uses with --secure-config."`
}

// Validate refuses a --partitions value outside 1 to room.MaxPartitions.
func (c *authconfCmd) Validate() error {
	return config.CheckPartitions(c.Partitions)
}

// Run prints the nats-server configuration block that gives an existing
// server or cluster the same users and permissions as secure mode.
func (c *authconfCmd) Run(s *streams) error {
	so, err := loadSecure(c.File, c.Stream, c.Prefix, c.Partitions)
	if err != nil {
		return err
	}
	conf, err := so.AuthorizationConf(c.Account)
	if err != nil {
		return fmt.Errorf("%w: %w", config.ErrInvalid, err)
	}
	_, err = io.WriteString(s.out, conf)
	return err
}
