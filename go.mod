module github.com/forewarn/forewarn

go 1.26.8

require (
	cloud.google.com/go/compute/metadata v0.10.0
	go.etcd.io/bbolt v1.5.0
	go.yaml.in/yaml/v3 v3.0.6
)

require (
	github.com/prometheus/client_golang v1.25.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
