package history

// Allocated returns how many rings h has made, in use or free.
func (h *History) Allocated() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.allocated
}

// FreeRings returns how many rings h holds for VMs to come.
func (h *History) FreeRings() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.free)
}
