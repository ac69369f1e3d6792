package redlock

import "time"

// The workers below are speed machinery, kept because they earn it: a node
// request runs on a worker that ran one before, rather than on a fresh
// goroutine. go-redis's call path is deep, and a fresh goroutine grows and
// copies its stack on every request; a worker has it already. Measured with
// BenchmarkWorkers (5 loopback masters, uncontended lock cycle, workers and
// fresh goroutines interleaved, 5 runs on a loaded 2-core machine): fresh
// goroutines cost 11% to 17% more per cycle, median 13.5%. Workers are the driver's: Close stops and awaits
// them, and each exits after workerIdle without work.

// workerIdle is how long a worker waits for more work before it exits.
const workerIdle = 5 * time.Second

// spawn runs f on a goroutine of the driver's, which Close awaits, unless
// Close has begun; it reports whether f was started. An idle worker takes
// f when there is one.
func (d *Driver) spawn(f func()) bool {
	d.spawnMu.Lock()
	defer d.spawnMu.Unlock()
	if d.stopping {
		return false
	}
	if d.noWorkers {
		d.wg.Go(f)
		return true
	}
	select {
	case d.idle <- f:
		return true
	default:
	}
	d.wg.Add(1)
	go d.work(f)
	return true
}

// work runs f, then the functions spawn hands it, until none comes for
// workerIdle or Close begins.
func (d *Driver) work(f func()) {
	defer d.wg.Done()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		f()
		f = nil // not kept alive while idle
		idle.Reset(workerIdle)
		select {
		case f = <-d.idle:
		case <-idle.C:
			return
		case <-d.ctx.Done():
			return
		}
	}
}
