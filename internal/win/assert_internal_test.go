package win

// The engine's forms of the windows are Windows, and the adapter of a
// Policy of another package is marked Foreign, so that the engine guards
// its calls. (Every window of this package is a Policy: package window's
// constructors return them as one.)
var (
	_ Window  = (*fastCompletion)(nil)
	_ Window  = (*fast)(nil)
	_ Foreign = (*foreign)(nil)
)
