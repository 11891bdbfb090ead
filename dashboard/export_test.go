package dashboard

// SampleCount is how many lag samples d holds for a group.
func SampleCount(d *Dashboard, stream, group string) int { return len(d.series.history(stream, group)) }
