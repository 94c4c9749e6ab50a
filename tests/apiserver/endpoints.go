package main

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
)

// endpoints are the loopback addresses a control plane serves on. They are
// kept in the data directory so that a restart with the same --data-dir
// serves on the same URLs: clients (and their kubeconfigs) reconnect to the
// same port instead of finding nothing there.
type endpoints struct {
	APIServerPort int    `json:"apiserverPort"`
	EtcdClientURL string `json:"etcdClientURL"`
	EtcdPeerURL   string `json:"etcdPeerURL"`
}

// loadEndpoints reads the endpoints a previous run saved at path; a missing
// file gives the zero value (pick free ports).
func loadEndpoints(path string) (endpoints, error) {
	var e endpoints
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return e, nil
	}
	if err != nil {
		return e, err
	}
	return e, json.Unmarshal(data, &e)
}

// save writes the endpoints atomically (a crash leaves the old file or the
// new one, never half of one).
func (e endpoints) save(path string) error {
	data, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
