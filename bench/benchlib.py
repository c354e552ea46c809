"""Shared by the CPU benchmarks (bench/run.py) and the real-GPU acceptance
harness (tests/gpu): result entries, the JSON files, and the tables in
bench/README.md.

An entry is one figure: a ratio ours/baseline (lower is better) from the
medians of several repetitions of each side, run in the same invocation.
"""

import datetime
import json
import os
import platform
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(HERE, 'README.md')
RESULTS = os.path.join(HERE, 'results')

CPU_BEGIN = '<!-- cpu-results:begin -->'
CPU_END = '<!-- cpu-results:end -->'
GPU_BEGIN = '<!-- gpu-results:begin -->'
GPU_END = '<!-- gpu-results:end -->'

CPU_HEADER = ('| figure | ratio | ours median s | baseline median s | baseline | reps | spread min-max s (ours / baseline) | '
              'overhead s | notes | machine | date |\n'
              '|---|---|---|---|---|---|---|---|---|---|---|')
GPU_HEADER = ('| date | machine | figure | ratio | ours median s | baseline median s | overhead s | '
              'protected killed (ours/baseline) | foreign killed (ours/baseline) | reps | checks | file |\n'
              '|---|---|---|---|---|---|---|---|---|---|---|---|')


def today():
    return datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d')


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def cpu_machine():
    """``Debian 12, 2 CPUs, 23 GiB, Python 3.11.7`` style description."""
    name = platform.system()
    try:
        with open('/etc/os-release') as handle:
            fields = dict(line.rstrip('\n').split('=', 1) for line in handle if '=' in line)
        name = fields.get('PRETTY_NAME', name).strip('"')
    except OSError:
        pass
    memory = ''
    try:
        with open('/proc/meminfo') as handle:
            for line in handle:
                if line.startswith('MemTotal:'):
                    memory = ', %d GiB' % round(int(line.split()[1]) / 1048576.0)
                    break
    except OSError:
        pass
    return '%s, %d CPUs%s, Python %s' % (name, os.cpu_count() or 0, memory, platform.python_version())


def summary(samples):
    """(median, min, max) of a list of seconds, or Nones when empty."""
    values = [float(value) for value in samples if value is not None]
    if not values:
        return None, None, None
    return statistics.median(values), min(values), max(values)


def entry(name, ours, baseline, baseline_text, machine, date=None, **extra):
    """One result entry from the samples of both sides (lists of seconds)."""
    ours_median, ours_min, ours_max = summary(ours)
    base_median, base_min, base_max = summary(baseline)
    ratio = None
    if ours_median is not None and base_median:
        ratio = round(ours_median / base_median, 4)
    result = {
        'name': name,
        'ratio': ratio,
        'ours_median_s': _round(ours_median),
        'baseline_median_s': _round(base_median),
        'baseline': baseline_text,
        'repetitions': min(len(ours), len(baseline)) if ours and baseline else max(len(ours), len(baseline)),
        'spread': {
            'ours_min_s': _round(ours_min), 'ours_max_s': _round(ours_max),
            'baseline_min_s': _round(base_min), 'baseline_max_s': _round(base_max),
        },
        'machine': machine,
        'date': date or today(),
        'ours_samples_s': [_round(value) for value in ours],
        'baseline_samples_s': [_round(value) for value in baseline],
    }
    result.update(extra)
    return result


def _round(value, digits=4):
    return None if value is None else round(float(value), digits)


def write_json(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + '.tmp'
    with open(tmp, 'w') as handle:
        json.dump(data, handle, indent=2, sort_keys=False)
        handle.write('\n')
    os.rename(tmp, path)


def _fmt(value, digits=3):
    if value is None:
        return '-'
    if isinstance(value, float):
        return ('%.' + str(digits) + 'f') % value
    return str(value)


def _spread_text(item):
    spread = item.get('spread') or {}
    return '%s-%s / %s-%s' % (_fmt(spread.get('ours_min_s')), _fmt(spread.get('ours_max_s')),
                              _fmt(spread.get('baseline_min_s')), _fmt(spread.get('baseline_max_s')))


def cpu_rows(results):
    rows = []
    for item in results:
        if item.get('skipped'):
            rows.append('| `%s` | skipped | - | - | %s | - | - | - | - | %s | %s |' % (
                item['name'], item.get('skipped'), item.get('machine', '-'), item.get('date', '-')))
            continue
        rows.append('| `%s` | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |' % (
            item['name'], _fmt(item.get('ratio')), _fmt(item.get('ours_median_s')),
            _fmt(item.get('baseline_median_s')), item.get('baseline', '-'), item.get('repetitions', '-'),
            _spread_text(item), _fmt(item.get('overhead_s')), _notes(item), item.get('machine', '-'),
            item.get('date', '-')))
    return rows


def _notes(item):
    """The extras of a CPU entry worth a glance: connection, fleet floor, 4 hosts."""
    notes = []
    if item.get('connection'):
        notes.append('connection %s' % item['connection'])
    if item.get('ratio_4_vs_1') is not None:
        notes.append('4 hosts: ratio %s' % _fmt(item['ratio_4_vs_1']))
    if item.get('floor_ratio') is not None:
        notes.append('one-ping floor: ratio %s (%s s / %s s)' % (
            _fmt(item['floor_ratio']), _fmt(item.get('floor_16_median_s')), _fmt(item.get('floor_1_median_s'))))
    if item.get('ansible_task_median_s') is not None:
        notes.append('Ansible task %s s' % _fmt(item['ansible_task_median_s']))
    return '; '.join(notes) or '-'


def _pair(value):
    if isinstance(value, dict):
        return '%s/%s' % (value.get('ours', '-'), value.get('baseline', '-'))
    return _fmt(value)


def checks_text(checks):
    """``all 30 passed`` or ``6 of 30 failed`` for a GPU run's checks."""
    failed = sum(1 for check in checks if not check.get('ok'))
    return ('all %d passed' % len(checks)) if not failed else '%d of %d failed' % (failed, len(checks))


def gpu_rows(results, file_name, checks='-'):
    rows = []
    for item in results:
        rows.append('| %s | %s | `%s` | %s | %s | %s | %s | %s | %s | %s | %s | %s |' % (
            item.get('date', '-'), item.get('machine', '-'), item['name'], _fmt(item.get('ratio')),
            _fmt(item.get('ours_median_s')), _fmt(item.get('baseline_median_s')), _fmt(item.get('overhead_s')),
            _pair(item.get('protected_killed')), _pair(item.get('foreign_killed')),
            item.get('repetitions', '-'), checks, file_name))
    return rows


def _read_readme(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return '# Benchmarks\n'


def _write_readme(path, text):
    tmp = path + '.tmp'
    with open(tmp, 'w') as handle:
        handle.write(text)
    os.rename(tmp, path)


def replace_cpu_table(results, path=README):
    """Put the table of the latest CPU run between the cpu-results markers."""
    text = _read_readme(path)
    table = '\n'.join([CPU_BEGIN, CPU_HEADER] + cpu_rows(results) + [CPU_END])
    if CPU_BEGIN in text and CPU_END in text:
        head, rest = text.split(CPU_BEGIN, 1)
        tail = rest.split(CPU_END, 1)[1]
        text = head + table + tail
    else:
        text = text.rstrip('\n') + '\n\n## CPU side\n\n' + table + '\n'
    _write_readme(path, text)


def add_gpu_rows(results, file_name, path=README, checks='-'):
    """Append one row per GPU figure to the table between the gpu-results markers.

    A file already in the table is not added twice.
    """
    text = _read_readme(path)
    rows = gpu_rows(results, file_name, checks)
    if GPU_BEGIN in text and GPU_END in text:
        head, rest = text.split(GPU_BEGIN, 1)
        body, tail = rest.split(GPU_END, 1)
        if ('| %s |' % file_name) in body:
            return False
        lines = [line for line in body.strip('\n').splitlines() if line.strip()]
        if not lines:
            lines = GPU_HEADER.splitlines()
        text = head + GPU_BEGIN + '\n' + '\n'.join(lines + rows) + '\n' + GPU_END + tail
    else:
        text = (text.rstrip('\n') + '\n\n## Real GPUs\n\n' + GPU_BEGIN + '\n' + GPU_HEADER + '\n'
                + '\n'.join(rows) + '\n' + GPU_END + '\n')
    _write_readme(path, text)
    return True
