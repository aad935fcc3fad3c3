// Package core is the connection core that both wires (rdma.Conn and
// rdma.RsocketConn) stand on, as Go's net stands on internal/poll: the
// state they share (Conn: locks, Close's flag, the failure, deadlines,
// the wake-ups of waiting Reads and Writes), the verbs objects created
// and released in one order (Endpoint), and the poll role that makes
// completions arrive for the callers that wait for them (PollState, its
// state, and Poller, its work, over the PolledConn each wire implements).
// It imports nothing of the root package.
package core
