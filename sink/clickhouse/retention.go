package clickhouse

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// DropExpiredPartitions enforces RetentionDays on servers without TTL
// (before 19.6): it drops the daily partitions (toYYYYMMDD of each table's
// partition column) older than the retention. On newer servers the TTL
// does this and the call does nothing. It returns the partitions dropped.
func DropExpiredPartitions(ctx context.Context, db Execer, d Dialect, now time.Time) ([]string, error) {
	if d.RetentionDays <= 0 || d.ttl() {
		return nil, nil
	}
	oldest, _ := strconv.Atoi(now.UTC().AddDate(0, 0, -d.RetentionDays).Format("20060102"))
	var dropped []string
	for _, t := range tables {
		name := d.storageTable(t.name)
		rows, err := db.QueryStrings(ctx, "SELECT DISTINCT partition FROM system.parts WHERE database = ? AND table = ? AND active", d.Database, name)
		if err != nil {
			return dropped, err
		}
		for _, r := range rows {
			// The partition value is a day number we made; anything else
			// is not ours to drop. Validated, because DDL cannot bind it.
			day, err := strconv.Atoi(r[0])
			if err != nil || day < 19700101 || day > 99991231 || day >= oldest {
				continue
			}
			if err := db.Exec(ctx, fmt.Sprintf("ALTER TABLE %s.%s%s DROP PARTITION %d", d.Database, name, d.onCluster(), day)); err != nil {
				return dropped, err
			}
			dropped = append(dropped, fmt.Sprintf("%s/%d", t.name, day))
		}
	}
	return dropped, nil
}
