package main

import (
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// TestPasswdReadsStdin: passwd hashes the first line of stdin (not a
// terminal) at the cost asked, never prints the password, and refuses one
// shorter than 8 bytes.
func TestPasswdReadsStdin(t *testing.T) {
	const pw = "a password read from stdin"
	status, out, errOut := invokeIn(t, pw+"\r\nthe next line is not read\n", "passwd", "--cost", "10")
	if status != exitOK {
		t.Fatalf("passwd: status %d, stderr %q", status, errOut)
	}
	hash := strings.TrimSuffix(out, "\n")
	if err := bcrypt.CompareHashAndPassword([]byte(hash), []byte(pw)); err != nil {
		t.Fatalf("%q is not the hash of the first line: %v", hash, err)
	}
	if cost, err := bcrypt.Cost([]byte(hash)); err != nil || cost != 10 {
		t.Errorf("cost %d (%v), want 10", cost, err)
	}
	if strings.Contains(out+errOut, "password read") {
		t.Errorf("the password is printed: %q %q", out, errOut)
	}
	if status, out, errOut := invokeIn(t, "short\n", "passwd", "--cost", "10"); status == exitOK || out != "" || !strings.Contains(errOut, "shorter than 8 bytes") {
		t.Errorf("a short password: status %d, stdout %q, stderr %q", status, out, errOut)
	}
}
