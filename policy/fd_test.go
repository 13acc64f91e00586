package policy

import "golang.org/x/sys/unix"

func pipe() (int, int, error) {
	var p [2]int
	err := unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC)
	return p[0], p[1], err
}

func writeByte(fd int) (int, error) { return unix.Write(fd, []byte{1}) }

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
