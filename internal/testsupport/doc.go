// Package testsupport is the scaffolding the module's tests share: whether
// they run inside the Soft-RoCE VM (and on which device and address), the
// test binary re-run as a peer process, the two ends of a connection made
// through a listener, and the conformance suites' lists of subtests. It
// imports nothing of the module, so that every
// package's tests, internal or external, can use it.
package testsupport
