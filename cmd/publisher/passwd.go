package main

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/crypto/bcrypt"
	"golang.org/x/term"

	"github.com/roompub/roompub/config"
)

type passwdCmd struct {
	Cost  int    `name:"cost" help:"bcrypt cost (10 to 16)." default:"11"`
	Out   string `name:"out" placeholder:"FILE" help:"Generate a random password and write it to FILE (mode 0600) instead of reading one."`
	Force bool   `name:"force" help:"Replace FILE if it exists."`
}

func (c *passwdCmd) Validate() error {
	if c.Cost < 10 || c.Cost > 16 {
		return fmt.Errorf("%w: --cost must be 10 to 16", config.ErrInvalid)
	}
	if c.Force && c.Out == "" {
		return fmt.Errorf("%w: --force needs --out", config.ErrInvalid)
	}
	return nil
}

// Run prints the bcrypt hash of a password for a secure config. The
// password is read from the terminal (twice, not echoed) or from the first
// line of stdin (s.in), or generated with --out; it is never an argument.
func (c *passwdCmd) Run(s *streams) error {
	var pw []byte
	switch {
	case c.Out != "":
		raw := make([]byte, 24)
		if _, err := rand.Read(raw); err != nil {
			return err
		}
		pw = []byte(base64.RawURLEncoding.EncodeToString(raw))
		if err := writeSecretFile(c.Out, append(append([]byte(nil), pw...), '\n'), c.Force); err != nil {
			return err
		}
	case isTerminal(s.in):
		fd := int(s.in.(*os.File).Fd())
		fmt.Fprint(s.err, "Password: ")
		p1, err := term.ReadPassword(fd)
		fmt.Fprintln(s.err)
		if err != nil {
			return err
		}
		fmt.Fprint(s.err, "Again: ")
		p2, err := term.ReadPassword(fd)
		fmt.Fprintln(s.err)
		if err != nil {
			return err
		}
		if string(p1) != string(p2) {
			return fmt.Errorf("%w: the passwords differ", config.ErrInvalid)
		}
		pw = p1
	default:
		line, err := bufio.NewReader(io.LimitReader(s.in, 4096)).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		pw = []byte(strings.TrimRight(line, "\r\n"))
	}
	if len(pw) < 8 {
		return fmt.Errorf("%w: the password is shorter than 8 bytes", config.ErrInvalid)
	}
	hash, err := bcrypt.GenerateFromPassword(pw, c.Cost)
	if err != nil {
		// ErrPasswordTooLong names no password.
		return fmt.Errorf("%w: %v", config.ErrInvalid, err)
	}
	_, err = fmt.Fprintln(s.out, string(hash))
	return err
}

func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
