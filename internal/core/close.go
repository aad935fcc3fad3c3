package core

import (
	"net"
	"time"
)

// ClosingWire is a wire's side of Close (Poller.Close).
type ClosingWire interface {
	DrainTime() time.Duration // how long the drain may take (HandshakeTimeout)
	Drain(dl *Deadline)       // delivers what was written, within dl
	ReleaseVerbs()            // once no post or poll is in flight
}

// Close is Close for either wire: pending Reads and Writes return
// net.ErrClosed, what was written is delivered (the wire's Drain), then
// the connection is disconnected and its verbs resources, ID, event
// channel and watch released.
func (r Poller) Close(w ClosingWire) error {
	f, e := r.F, r.E
	if err := f.MarkClosed(); err != nil {
		return err
	}
	r.LookAgain() // a sleeping poll role holder sees the Close
	// Wait for Reads and Writes in progress to leave the buffers.
	f.ReadMu.Lock()
	defer f.ReadMu.Unlock()
	f.WriteMu.Lock()
	defer f.WriteMu.Unlock()
	dl := MakeDeadline()
	dl.Set(time.Now().Add(w.DrainTime()))
	w.Drain(&dl)
	dl.Stop()
	_ = e.ID.Disconnect()
	w.ReleaseVerbs()
	e.ID.Destroy()
	e.Events.Close() // ends cmLoop, or the timed watch's events
	f.Watch.Stop()
	f.ReadDL.Stop()
	f.WriteDL.Stop()
	return nil
}

// WriteShutter is a wire's side of CloseWrite (Poller.CloseWrite); its
// methods but Flush are called with Mu held.
type WriteShutter interface {
	WriteShutLocked() bool          // the sending side is shut already
	ShutWriteLocked() (bool, error) // shuts it if there is room: done, and the post's error
	Flush() error                   // posts what ShutWriteLocked queued
}

// CloseWrite is CloseWrite for either wire: it shuts the sending side
// once there is room to say so, waiting for it as a Write does.
func (r Poller) CloseWrite(w WriteShutter) error {
	f := r.F
	f.WriteMu.Lock()
	defer f.WriteMu.Unlock()
	for {
		f.Mu.Lock()
		var err error
		switch {
		case f.Closed:
			err = net.ErrClosed
		case w.WriteShutLocked():
		case f.Err != nil:
			err = f.Err
		default:
			done, perr := w.ShutWriteLocked()
			if !done {
				f.Mu.Unlock()
				r.Await(f.SndReady, nil, false)
				continue
			}
			if err = perr; err == nil {
				f.Mu.Unlock()
				err = w.Flush()
				f.Mu.Lock()
			}
		}
		f.Mu.Unlock()
		if err != nil {
			return f.OpErr("close", err)
		}
		return nil
	}
}
