// Package repocheck holds checks of the repository itself, run by go test (also under
// -short, with no Docker): every relative link of README.md and docs/*.md resolves,
// docs/architecture.md names every package, no large file is tracked, and build outputs
// are ignored. It has no code of its own.
package repocheck
