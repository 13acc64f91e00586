package bridge

// FdWatcher adds descriptors to, and removes them from, what a parked worker
// waits on (policy.Waiter implements it).
type FdWatcher interface {
	Watch(fd int) error
	Unwatch(fd int) error
}

// FdWaker is a Waker whose app kicks through descriptors of its own (a
// vhost-user vring's kick eventfd) rather than only the worker's eventfd.
// NewWorker binds it to the worker's waiter; the waker then watches and
// unwatches its descriptors itself, on the worker's thread (in
// PrepareToPark), as they come and go with the app. A ring-mode Waker does
// not implement it and nothing changes for it.
type FdWaker interface {
	Waker
	BindWatcher(FdWatcher)
}
