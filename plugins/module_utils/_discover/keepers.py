# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Keepers: the live processes that keep a context whose creator is gone.

A CUDA context belongs to the open file descriptions of ``/dev/nvidia*``,
which threads share and ``fork`` or ``SCM_RIGHTS`` pass on. Its memory is
freed when the last of them closes, whoever holds it, and NVML goes on
listing the PID that created it. So when NVML lists a PID on a GPU that no
longer exists here, or whose every thread has exited, the memory is kept by
whoever still holds that GPU's node: a DataLoader-like child forked without
exec, or a process the descriptors were sent to.

Which holder of the node keeps it cannot be read from ``/proc``, so each
candidate is ranked by the evidence, strongest first:

1. ``mapped``: it has the GPU's node mapped (``/proc/PID/maps``), as a
   process forked from a CUDA process has;
2. ``session``: its session or process group is the dead creator's (it was
   forked by it, or started with it);
3. ``received``: it holds the node but has mapped no NVIDIA node at all, so
   it never opened the driver itself: it was given the descriptors;
4. ``client``: it mapped ``/dev/nvidiactl`` only, as an NVML client (a
   monitor, an exporter) does for its own sake. It is a keeper only when
   nothing stronger explains the memory.

A candidate whose maps could not be read in time ranks as ``received``.
Ranks 1 to 3 make the holder's kind ``compute``; rank 4 leaves it a
``client``. The release takes the strongest candidates of a context first
and the weaker ones only while the context stays (``_release.escalation``).

Nothing here decides by a name. This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

MAPPED = 'mapped'
DESCENDANT = 'descendant'
SESSION = 'session'
RECEIVED = 'received'
CLIENT = 'client'

RANKS = {MAPPED: 1, DESCENDANT: 2, SESSION: 2, RECEIVED: 3, CLIENT: 4}
# Why a weaker keeper of a context was not signalled: the same words in check mode and after the run.
KEEPER_HELD_BACK = 'weaker keeper: signalled only if the context stays once its stronger keepers are released'
# Seconds after the last release before a kept context is taken to have stayed.
KEEPER_ROUND_SLACK = 0.5

EVIDENCE_TEXT = {
    MAPPED: 'has the GPU node mapped',
    DESCENDANT: 'descends from the exited creator',
    SESSION: 'in the session or process group of the exited creator',
    RECEIVED: 'holds the node without having opened the driver itself (descriptors received)',
    CLIENT: 'an NVML client: only what else explains the memory is released first',
}


def gone_creators(nvml_processes, records_by_pid, missing_pids):
    """``{gpu index: {pid: MiB}}`` of the PIDs NVML lists whose process is gone.

    ``nvml_processes`` maps a GPU index to ``{pid: {"memory_mib", ...}}``;
    ``records_by_pid`` the holder records built; ``missing_pids`` the listed
    PIDs with no process here. A listed process whose every thread has exited
    (a zombie) holds no file, so its context is kept by someone else too.
    """
    gone = {}
    for index, processes in nvml_processes.items():
        for pid, entry in processes.items():
            record = records_by_pid.get(pid)
            if pid in missing_pids or (record is not None and record.get('state') in ('zombie', 'dead')):
                gone.setdefault(index, {})[pid] = entry.get('memory_mib') or 0
    return gone


# Memory beyond what NVML's live processes account for that counts as a context whose creator is gone.
# Per-process figures are rounded and leave some driver overhead out: a little slack is no context.
UNEXPLAINED_MIB = 256


def unexplained_memory(gpus, nvml_processes, records_by_pid, gone):
    """``{gpu index: MiB}`` used beyond what the live processes NVML lists account for.

    Only for GPUs with no gone creator already (``gone``), whose every listed
    process reports its memory, and where the excess is above ``UNEXPLAINED_MIB``.
    """
    found = {}
    for gpu in gpus:
        index, used = gpu['index'], gpu.get('memory_used_mib')
        # Without the v2 struct (no reserved figure), used memory counts the driver's reservation.
        if used is None or gpu.get('memory_reserved_mib') is None or index in gone:
            continue
        listed = nvml_processes.get(index) or {}
        if any(entry.get('memory_mib') is None for entry in listed.values()):
            continue
        accounted = sum(entry['memory_mib'] for pid, entry in listed.items()
                        if (records_by_pid.get(pid) or {}).get('state') not in (None, 'zombie', 'dead'))
        if used - accounted > UNEXPLAINED_MIB:
            found[index] = used - accounted
    return found


def evidence_of(record, index, minor, creators, maps, descendants=(), sessions=(), use_sessions=True):
    """The evidence, strongest first, that ``record`` keeps a context of GPU ``index``.

    ``minor`` is the GPU's device minor; ``creators`` the gone PIDs on it;
    ``maps`` the NVIDIA paths the process has mapped, or None when unread.
    Where the creators were seen alive (a release's own targets),
    ``descendants`` are the PIDs that descended from them then, and
    ``sessions`` their sessions. A session that reads 0 (led from outside
    this PID namespace) is no evidence, nor is any without ``use_sessions``.
    Maps that could not be read give no evidence either way.
    """
    evidence = []
    gpu_node = '/nvidia%d' % minor
    if maps is not None and any(path.endswith(gpu_node) for path in maps):
        evidence.append(MAPPED)
    if record['pid'] in descendants:
        evidence.append(DESCENDANT)
    session, group = record.get('session'), record.get('pgrp')
    if use_sessions and session not in (None, 0) and (session in creators or group in creators
                                                      or session in sessions):
        evidence.append(SESSION)
    if maps is not None and not maps:
        evidence.append(RECEIVED)
    elif maps is not None and MAPPED not in evidence:
        evidence.append(CLIENT)
    return evidence


def attribute(holders, gone, index_to_minor, maps_of, nvml_listed, clients_may_keep=True, unexplained=None,
              selected=None):
    """Mark the keepers among ``holders`` (records, changed in place); return the contexts.

    ``gone`` is ``gone_creators``'s answer; ``maps_of(pids)`` returns
    ``{pid: set of mapped NVIDIA paths or None}``; ``nvml_listed`` maps a GPU
    index to the set of PIDs NVML lists on it (those hold a context of their
    own there). Returns ``[{"gpu", "creator_pids", "memory_mib", "keepers"}]``.
    Records of the module itself and its ancestors are never keepers, nor
    processes NVML lists on any GPU, nor,
    unless ``clients_may_keep``, a candidate with no evidence but ``client``.
    ``unexplained`` (``unexplained_memory``) adds, per GPU, memory no live
    process accounts for: a context whose creator NVML no longer names
    (``creator_pids`` empty), recorded only where some process may keep it.
    Only the GPUs in ``selected`` (None: all) are looked at: a record keeps
    nothing outside them.
    """
    contexts = []
    gone = dict(gone)
    unexplained = dict(unexplained or {})
    for index, mib in unexplained.items():
        gone.setdefault(index, {None: mib})
    if selected is not None:
        gone = dict((index, creators) for index, creators in gone.items() if index in selected)
    if not gone:
        return contexts
    candidates = {}
    for index in sorted(gone):
        for record in holders:
            # A process NVML lists anywhere computes on its own contexts; a CUDA process opens the node of
            # every GPU it can see. It is no keeper of another's.
            if record.get('is_self') or record.get('nvml_types') or record['pid'] in nvml_listed.get(index, ()):
                continue
            if index in (record.get('node_gpus') or record.get('gpus') or []):
                candidates.setdefault(index, []).append(record)
    wanted = sorted(set(record['pid'] for records in candidates.values() for record in records))
    maps = maps_of(wanted) if wanted else {}
    for index in sorted(gone):
        creators = dict((pid, mib) for pid, mib in gone[index].items() if pid is not None)
        memory = sum(gone[index].values())
        keepers = []
        for record in candidates.get(index, []):
            evidence = evidence_of(record, index, index_to_minor.get(index, index), set(creators),
                                   maps.get(record['pid']))
            if not evidence:
                continue
            rank = min(RANKS[item] for item in evidence)
            if rank == RANKS[CLIENT] and not clients_may_keep:
                continue
            record.setdefault('keeps', []).append({
                'gpu': index, 'creator_pids': sorted(creators), 'memory_mib': memory,
                'evidence': evidence, 'rank': rank})
            current = record.get('keeper_rank')
            record['keeper_rank'] = rank if current is None else min(current, rank)
            if rank < RANKS[CLIENT]:
                record['kind'] = 'compute'
            if index not in record['gpus']:
                record['gpus'] = sorted(set(record['gpus']) | set([index]))
            keepers.append(record['pid'])
        if creators or keepers:
            contexts.append({'gpu': index, 'creator_pids': sorted(creators), 'memory_mib': memory,
                             'keepers': sorted(keepers)})
    return contexts


def left_behind(exited, listed, node_holders, index_of_minor, known, describe_pid, maps_of):
    """Keepers of the contexts that a release's exited targets left behind.

    ``exited`` maps the PID of each exited target that NVML still lists
    (``listed``: GPU index -> PIDs) to its record, with ``descendants`` (the
    PIDs that descended from it when the release started). ``node_holders``
    is a ``/proc`` scan (``{pid: {"minors": set}}``); ``index_of_minor`` maps
    a device minor to a GPU index; ``known`` PIDs are never candidates (the
    release's targets, this module). ``describe_pid(pid)`` returns a record
    (``pid``, ``session``, ``pgrp``, ...) or None; ``maps_of(pids)`` the mapped
    NVIDIA paths. Returns the candidates' records, each with ``keeps`` and
    ``keeper_rank``: the release judges them by its scope and protection.
    """
    by_gpu = {}
    for index, pids in listed.items():
        creators = sorted(pid for pid in pids if pid in exited)
        if creators:
            by_gpu[index] = creators
    if not by_gpu:
        return []
    listed_anywhere = set(pid for pids in listed.values() for pid in pids)
    candidates = {}
    for pid, held in node_holders.items():
        # A process NVML lists computes on its own contexts (see ``attribute``).
        if pid in known or pid in exited or pid in listed_anywhere:
            continue
        for minor in held.get('minors') or ():
            index = index_of_minor(minor)
            if index in by_gpu:
                candidates.setdefault(pid, set()).add((index, minor))
    if not candidates:
        return []
    maps = maps_of(sorted(candidates))
    found = []
    for pid in sorted(candidates):
        record = describe_pid(pid)
        if record is None:
            continue
        for index, minor in sorted(candidates[pid]):
            creators = by_gpu[index]
            descendants = set(child for c in creators for child in exited[c].get('descendants') or ())
            sessions = set(exited[c].get('session') for c in creators) - set([None])
            evidence = evidence_of(record, index, minor, set(creators), maps.get(pid), descendants, sessions)
            if not evidence:
                continue
            rank = min(RANKS[item] for item in evidence)
            memory = sum(int((exited[c].get('gpu_memory_mib') or {}).get(str(index)) or 0) for c in creators)
            record.setdefault('keeps', []).append({'gpu': index, 'creator_pids': creators, 'memory_mib': memory,
                                                   'evidence': evidence, 'rank': rank})
            record['keeper_rank'] = min(record.get('keeper_rank') or rank, rank)
        if not record.get('keeps'):
            continue
        record['gpus'] = sorted(set(record.get('gpus') or []) | set(entry['gpu'] for entry in record['keeps']))
        record['kind'] = 'compute' if record['keeper_rank'] < RANKS[CLIENT] else 'client'
        found.append(record)
    return found


def describe(record):
    """``keeps the context of exited pid 41 on GPU 0 (has the GPU node mapped)``, or ''."""
    parts = []
    for entry in record.get('keeps') or []:
        parts.append('%s on GPU %d (%s)' % (_whose(entry), entry['gpu'],
                                            '; '.join(EVIDENCE_TEXT[item] for item in entry['evidence'])))
    return ', '.join(parts)


def _whose(context):
    if context['creator_pids']:
        return 'keeps the context of exited pid %s' % ', '.join(str(pid) for pid in context['creator_pids'])
    return 'may keep %d MiB that no live process NVML lists accounts for' % context['memory_mib']


def warnings_for(contexts):
    """One line per context: who keeps it, or that nobody here does."""
    lines = []
    for context in contexts:
        creators = ', '.join(str(pid) for pid in context['creator_pids'])
        if not context['creator_pids']:
            lines.append('GPU %d: %d MiB used beyond what the live processes NVML lists account for; pid %s '
                         'hold the GPU\'s node and may keep it' % (
                             context['gpu'], context['memory_mib'], ', '.join(str(p) for p in context['keepers'])))
        elif context['keepers']:
            lines.append('GPU %d: NVML lists PID %s (%d MiB), which has exited; its context is kept by pid %s'
                         % (context['gpu'], creators, context['memory_mib'],
                            ', '.join(str(pid) for pid in context['keepers'])))
        else:
            lines.append('GPU %d: NVML lists PID %s (%d MiB), but no such process is alive here, and no other '
                         'process here holds the GPU\'s node (it exited, or it runs in another PID namespace); '
                         'its memory still counts on its GPU'
                         % (context['gpu'], creators, context['memory_mib']))
    return lines


def keeper_round(record, contexts_alive=None):
    """The rank (1 strongest) at which ``record`` keeps a context still alive, or None.

    ``contexts_alive(entry)`` says whether a ``keeps`` entry's context is still
    there (None: all are).
    """
    ranks = [entry['rank'] for entry in record.get('keeps') or []
             if contexts_alive is None or contexts_alive(entry)]
    return min(ranks) if ranks else None


def keeper_rounds(records, contexts_alive=None):
    """``(now, later)``: the keepers to release in this round, and those held back.

    For each context still alive, the strongest candidates (lowest rank) go
    now; the weaker ones wait until a look shows that the context stayed.
    Records that keep no live context are in neither list. Pure.
    """
    best = {}
    for record in records:
        for entry in record.get('keeps') or []:
            if contexts_alive is None or contexts_alive(entry):
                key = (entry['gpu'], tuple(entry['creator_pids']))
                best[key] = min(best.get(key, entry['rank']), entry['rank'])
    now, later = [], []
    for record in records:
        alive = [entry for entry in record.get('keeps') or []
                 if contexts_alive is None or contexts_alive(entry)]
        if not alive:
            continue
        if any(entry['rank'] == best[(entry['gpu'], tuple(entry['creator_pids']))] for entry in alive):
            now.append(record)
        else:
            later.append(record)
    return now, later
