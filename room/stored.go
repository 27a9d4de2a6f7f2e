package room

// StoredMsg is one attested message the gate appended, as it told the
// checkpointer of it (the gate's AttestationSink): enough to check the
// message's attestation once the server has stored it, without reading
// it back (docs/checkpoints.md). A record marker stored in the batch of
// its record has only its Subject: no leaf.
type StoredMsg struct {
	Subject string   // the subject it is stored on
	Header  string   // its checkpoint.AttestationHeader value
	Content [32]byte // checkpoint.ContentHash of its data
	// Position is the position its attestation signs
	// (checkpoint.Statement.Position), or "" when the gate does not say:
	// the checkpointer admits a message the gate announced without its
	// batch's signature checked only at the position announced.
	Position string
}
