// Package mbuf holds mbuf.h, the per-packet mbuf code (a chain walked into
// iovecs with its checks, a frame copied into a fresh chain) that the C
// halves of packages ring and vhost both compile in, so that the two app
// sides judge and build packets the same way. It has no Go code.
package mbuf
