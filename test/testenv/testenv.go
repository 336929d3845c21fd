// Package testenv holds the one rule the test suite uses for "in CI": the
// CI environment variable set, to any value. In CI a missing tool or
// service fails the test that needs it (the test script installs them);
// outside CI such a test is skipped, saying what to install.
package testenv

import "os"

// InCI says whether the tests run in CI: CI is set, whatever its value
// (GitHub and GitLab set "true", others "1" or "yes").
func InCI() bool { return os.Getenv("CI") != "" }
