// Package docs holds Tether's documentation, and the test that keeps its
// commands true: every shell block of README.md and docs/*.md marked
// runnable (an HTML comment `<!-- runnable -->` on the line before the
// block's opening fence) is run, as written, with a tether binary built
// from this tree on PATH, in a temporary directory holding a copy of
// examples/ and the Makefile. It has no code of its own; see its tests and
// DEVELOPERS.md.
package docs
