// Command gpx_replaywatch is the backend of the replaywatch Grafana data
// source: Grafana starts it and talks to it over gRPC (the plugin SDK's
// datasource.Manage).
package main

import (
	"os"

	"github.com/grafana/grafana-plugin-sdk-go/backend/datasource"
	"github.com/grafana/grafana-plugin-sdk-go/backend/log"

	"github.com/replaywatch/replaywatch/dashboards/plugin/pkg/plugin"
)

func main() {
	if err := datasource.Manage(plugin.ID, plugin.NewDatasource, datasource.ManageOpts{}); err != nil {
		log.DefaultLogger.Error(err.Error())
		os.Exit(1)
	}
}
