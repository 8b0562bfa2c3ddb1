//go:build tools

// Package tools pins the Prometheus server and promtool so that go mod tidy keeps their
// requirements (tools/build.sh builds both).
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
