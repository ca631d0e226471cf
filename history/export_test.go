package history

// Allocated returns how many rings h has made, in use or free.
func (h *History) Allocated() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.allocated
}
