package bridge

// FdWatcher adds descriptors to, and removes them from, what a parked worker
// waits on (policy.Waiter implements it): what App.WatchKicks gets.
type FdWatcher interface {
	Watch(fd int) error
	Unwatch(fd int) error
}
