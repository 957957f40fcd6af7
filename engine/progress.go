package engine

import "sync"

// progress reports an Apply's Progress to ApplyOptions.Progress, one call at a time. A nil
// *progress reports nothing.
type progress struct {
	mu sync.Mutex
	fn func(Progress)
	p  Progress
}

func newProgress(fn func(Progress)) *progress {
	if fn == nil {
		return nil
	}
	return &progress{fn: fn}
}

// stage starts stage s with total objects.
func (p *progress) stage(s Stage, total int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.p = Progress{Stage: s, Total: total}
	p.fn(p.p)
}

// step counts one object of the current stage as done.
func (p *progress) step() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.p.Done++
	p.fn(p.p)
}

// set sets how many objects of the current stage are done.
func (p *progress) set(done int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.p.Done != done {
		p.p.Done = done
		p.fn(p.p)
	}
}
