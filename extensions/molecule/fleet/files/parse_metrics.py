"""Read a node_exporter textfile from stdin with Prometheus' own text parser.

Prints {"types": {family: type}, "samples": {"name{label=value,...}": value}} as JSON.
"""
import json
import sys

from prometheus_client.parser import text_string_to_metric_families

types, samples = {}, {}
for family in text_string_to_metric_families(sys.stdin.read()):
    types[family.name] = family.type
    for sample in family.samples:
        labels = ','.join('%s=%s' % item for item in sorted(sample.labels.items()))
        samples[sample.name + ('{%s}' % labels if labels else '')] = sample.value
json.dump({'types': types, 'samples': samples}, sys.stdout)
