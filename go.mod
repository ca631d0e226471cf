module github.com/forewarn/forewarn

go 1.26.8

require (
	cloud.google.com/go/compute/metadata v0.10.0
	go.etcd.io/bbolt v1.5.0
	go.yaml.in/yaml/v3 v3.0.6
)

require golang.org/x/sys v0.46.0 // indirect
