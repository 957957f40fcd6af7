// Package fence is the transport that refuses a daemon's writes once it may no longer make
// them: Guard asks a check before each mutating request, again while it is in flight and as
// its body is read. The daemon's pause fence and the shard fence (package shard) are its
// checks. It imports nothing of the daemon.
package fence
