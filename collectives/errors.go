package collectives

import (
	"errors"
	"fmt"
)

var (
	// ErrBroken is matched (errors.Is) by the error of every operation
	// started after a failure: a Group that failed once stays failed.
	ErrBroken = errors.New("collectives: group is broken")

	// ErrClosed is the cause recorded by Close.
	ErrClosed = errors.New("collectives: group is closed")

	// ErrBusy is returned when an operation starts while another one of the
	// same Group is running. It does not break the Group.
	ErrBusy = errors.New("collectives: another operation of this group is running")

	// ErrNotConnected is matched by the error of an operation that needs a
	// link that was nil in NewGroup.
	ErrNotConnected = errors.New("not connected")
)

// RankError is a failure attributed to one peer: its connection was lost or
// it sent a frame that does not belong to the current operation.
type RankError struct {
	Rank int    // the peer
	Op   string // "send", "receive", "frame", "link"
	Err  error
}

func (e *RankError) Error() string {
	return fmt.Sprintf("rank %d: %s: %v", e.Rank, e.Op, e.Err)
}

func (e *RankError) Unwrap() error { return e.Err }

// brokenError is what operations return once the Group has failed.
type brokenError struct {
	op    string
	cause error
}

func (e *brokenError) Error() string {
	return fmt.Sprintf("collectives: %s: group is broken by an earlier failure: %v", e.op, e.cause)
}

func (e *brokenError) Unwrap() []error { return []error{ErrBroken, e.cause} }

// opError is the error of the operation that failed first.
type opError struct {
	op    string
	cause error
}

func (e *opError) Error() string { return fmt.Sprintf("collectives: %s: %v", e.op, e.cause) }

func (e *opError) Unwrap() error { return e.cause }
