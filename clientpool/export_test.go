package clientpool

// EvictWork returns how many idle limiters eviction has looked at so far.
func (p *Pool) EvictWork() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.evictWork
}
