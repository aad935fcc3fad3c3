// Package core is the connection core that both wires (rdma.Conn and
// rdma.RsocketConn) stand on, as Go's net stands on internal/poll: the
// deadlines of Reads and Writes, and the poll role that makes completions
// arrive for the callers that wait for them. It imports nothing of the
// root package.
package core
