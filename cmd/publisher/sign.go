package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	"github.com/roompub/roompub/config"
	"github.com/roompub/roompub/events"
)

type signCmd struct {
	Key string `name:"key" required:"" placeholder:"FILE" help:"Host key file written by 'publisher keygen'."`
	// AllowOpenKeyFile: config.ReadKeyFile.
	AllowOpenKeyFile bool   `name:"allow-open-key-file" help:"Use a --key file that group or others may access; without it such a file is refused, as ssh refuses such keys."`
	Record           string `arg:"" name:"record" placeholder:"RECORD.json" help:"Execution record to sign (a JSON object); its host/node-id, execution/ref and signature are replaced."`
}

func (c *signCmd) Run(s *streams) error {
	keyPEM, err := config.ReadKeyFile(c.Key, c.AllowOpenKeyFile)
	if err != nil {
		return fmt.Errorf("read key: %w", err)
	}
	key, err := events.ParseHostKey(keyPEM)
	if err != nil {
		return fmt.Errorf("key %s: %w", c.Key, err)
	}
	raw, err := os.ReadFile(c.Record)
	if err != nil {
		return fmt.Errorf("read record: %w", err)
	}
	out, err := signRecord(raw, key)
	if err != nil {
		return fmt.Errorf("record %s: %w", c.Record, err)
	}
	_, err = s.out.Write(out)
	return err
}

// signRecord signs the JSON object raw with key and returns the signed
// record pretty-printed: its RFC 8785 form (keys sorted, numbers and
// strings as stored) indented by two spaces, with a trailing newline.
func signRecord(raw []byte, key *events.HostKey) ([]byte, error) {
	members, _, err := events.DecodeObject(raw)
	if err != nil {
		return nil, err
	}
	rec, err := events.SignRecord(members, key)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, rec.Canonical(), "", "  "); err != nil {
		return nil, err
	}
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}
