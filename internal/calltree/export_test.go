package calltree

// ClampedSum is clampedSum for the external tests.
var ClampedSum = clampedSum
