// Package peercred reads the credentials the peer of a Unix socket
// connected with, for the control sockets of softib's daemons (lnetd's
// and the device snapshot socket of softib stat), which serve only root
// and their own user.
package peercred
