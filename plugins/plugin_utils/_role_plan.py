# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Every decision of the role, from its variables and what its tasks registered.

The role's tasks only branch on booleans and pass on values that these
functions return: ``role_settings`` once per run (what the variables alone
decide), ``role_plan`` whenever a task asks (what the results so far decide:
the first look, the stages to run, what was stopped, the reset, the failure),
and ``role_summary_run`` for the per-host summary. Controller side only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._failure_reason import failure_reason
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._filter_input import truth
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._keep_units import keep_units
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._missing_containers import missing_containers
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._reset_plan import reset_stage
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._stages import ORDER, stages_to_run, tag_selected
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._unit_patterns import expand_units, unmatched_warnings
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._waits import wait_plan

# The role's results, each as its task registered it; preflight empties them all.
RESULTS = ('first_look', 'keep_found', 'units_found', 'units_stopped', 'containers_state', 'containers_stopped',
           'release', 'proof', 'before_reset', 'reset_failure', 'restore_persistence', 'restore_clients')


# The plan of a run whose preflight did not run.
NOTHING = {'look_files': [], 'stage_files': [], 'summary_files': [], 'summary_in_look': False, 'run_files': [],
           'stages': {'keep_found': False, 'prove': False}}


def _listed(value):
    # A string is one name, never its characters (role_variable_errors refuses a string for a list variable).
    if isinstance(value, str):
        return [value] if value else []
    return list(value or [])


def role_settings(variables, run_tags=('all',), skip_tags=(), check_mode=False, interpreter=None):
    """What the role's variables alone decide, worked out once per run (preflight keeps it as a fact).

    ``needs_root``: root is needed to release other users' processes (``gpu_reclaim_require_root``) and always
    to install, reset, stop or harden. ``python``: the role's virtualenv when it installs the libraries there,
    else ``interpreter`` (the inventory's). ``look_in_release``: with nothing to harden, stop or keep first,
    and the release selected by the tags, the release is also the first look (one task reaches a busy host
    twice instead of three times). ``prove_in_release``: with that, no reset allowed, and the proof selected, the
    release proves the GPUs free too (gpu_reclaim's ``prove``), so that one task reaches a busy host.
    ``waits``: ``_waits.wait_plan``. ``pip_environment``: where pip finds
    nvidia-ml-py. ``stages``: the stages these variables and tags may run after the first look, in order
    (each runs only when it has something to do: the release and the proof only on busy GPUs).
    """
    variables = dict(variables or {})
    stops = bool(_listed(variables.get('stop_units'))) or bool(_listed(variables.get('stop_containers')))
    install = truth(variables.get('install_dependencies'))
    needs_root = (truth(variables.get('require_root')) or install or truth(variables.get('allow_reset'))
                  or stops or bool(_listed(variables.get('harden_units'))))
    look_in_release = (not _listed(variables.get('harden_units')) and not stops
                       and not _listed(variables.get('keep_units'))
                       and tag_selected('gpu_reclaim_release', _listed(run_tags) or ['all'], _listed(skip_tags)))
    # With no reset between them, the release proves the GPUs free itself: one task instead of two.
    prove_in_release = (look_in_release and not truth(variables.get('allow_reset')) and not check_mode
                        and tag_selected('gpu_reclaim_prove', _listed(run_tags) or ['all'], _listed(skip_tags)))

    venv = variables.get('venv') or ''
    environment = {}
    if variables.get('pip_find_links'):
        environment.update({'PIP_NO_INDEX': '1', 'PIP_FIND_LINKS': variables['pip_find_links']})
    if variables.get('pip_index_url'):
        environment['PIP_INDEX_URL'] = variables['pip_index_url']
    run_tags, skip_tags = _listed(run_tags) or ['all'], _listed(skip_tags)
    wanted = {
        'harden': bool(_listed(variables.get('harden_units'))),
        'stop_units': bool(_listed(variables.get('stop_units'))),
        'stop_containers': bool(_listed(variables.get('stop_containers'))),
        'release': True,
        'reset': truth(variables.get('allow_reset')),
        'prove': not check_mode,
    }
    return {
        'needs_root': needs_root,
        'install': install,
        'stages': [name for name, tag in ORDER if wanted[name] and tag_selected(tag, run_tags, skip_tags)],
        'python': (venv + '/bin/python') if install else interpreter,
        'look_in_release': look_in_release,
        'prove_in_release': prove_in_release,
        'waits': wait_plan({'stop_units': bool(_listed(variables.get('stop_units')))}, check_mode),
        'pip_environment': environment,
    }


def _is(result, key):
    # Ansible's `is changed` / `is skipped` tests: the key, or any item of a loop's results.
    return bool(result.get(key)) or any(bool((item or {}).get(key)) for item in result.get('results') or [])


def proven_in_release(settings, results):
    """``results`` with the release's own proof as the proof's, when the release proved the GPUs free."""
    if settings.get('prove_in_release') and results['release'].get('proof'):
        return dict(results, proof=dict(results['release']['proof']))
    return results


def first_look(state):
    """The first look, in gpu_assert_free's shape: its own task's result, or the release's ``before``."""
    results = state['results']
    if state['settings']['look_in_release']:
        return dict(results['release'].get('before') or {})
    return results['first_look']


def look_failed(state):
    """A first look that failed: no result, no root where it is needed, no NVML where it is required.

    Busy GPUs are no failure. The release, as the first look, refuses without root itself.
    """
    results, settings = state['results'], state['settings']
    if settings['look_in_release']:
        release = results['release']
        return bool(release) and not release.get('skipped') and 'released' not in release
    look = results['first_look']
    if not look or look.get('skipped'):
        return False
    return ('free' not in look or (settings['needs_root'] and (look.get('uid') or 0) != 0)
            or (truth(state['variables'].get('require_nvml')) and not look.get('nvml_available')))


def _reason(state, failed):
    settings = state['settings']
    return failure_reason(failed, state['host'], settings['python'], state['variables'].get('venv') or '',
                          settings['needs_root'])


def _stopped_units(state, units_to_stop):
    results = state['results']
    stopped = results['units_stopped']
    # In check mode the stop is skipped, and the units it would stop are its plan.
    if _is(stopped, 'changed') or (state['check_mode'] and _is(stopped, 'skipped')
                                   and 'stdout' in results['units_found']):
        return units_to_stop
    return []


def _containers(state):
    inspections = state['results']['containers_state'].get('results') or []
    missing = [entry for entry in inspections if entry.get('rc') != 0]
    running = [entry for entry in inspections if (entry.get('stdout') or '').startswith('true ')]
    stopped = [((entry.get('item') or {}).get('stdout') or '').split()[-1:]
               for entry in state['results']['containers_stopped'].get('results') or []]
    return missing, running, [words[0] for words in stopped if words]


def role_plan(state):
    """The role's decisions from ``state``: ``host``, ``check_mode``, ``run_tags``, ``skip_tags``,
    ``variables`` (the ``gpu_reclaim_`` variables without their prefix), ``settings`` (``role_settings``),
    ``error`` (why preflight or a stage failed, or empty) and ``results`` (every name of RESULTS: what the
    role's tasks registered, empty when they did not run).

    Every key of the answer is what one task branches on or passes to a module; ``stages`` says which stage
    file runs, each by its tag and what it has to do (``_stages.stages_to_run``).
    """
    variables, settings = state['variables'], state['settings']
    if not settings:
        # Preflight did not run (no tag of the role's selected it): nothing to do, nothing to show.
        return dict(NOTHING)
    results = proven_in_release(settings, dict((name, dict((state.get('results') or {}).get(name) or {}))
                                               for name in RESULTS))
    state = dict(state, results=results)
    look = first_look(state)
    keep = keep_units(look, results['keep_found'].get('stdout') or '', _listed(variables.get('keep_units')))
    if settings['look_in_release']:
        free = bool(results['release'].get('free_at_start'))
    else:
        free = bool(look.get('free')) and bool(look.get('nvml_available'))
    free = free or bool(keep['kept'])
    failed_look = look_failed(state)
    if state.get('error'):
        preflight_error = state['error']
    elif failed_look:
        preflight_error = _reason(state, results['release'] if settings['look_in_release'] else look)
    else:
        preflight_error = ''
    run_tags, skip_tags = _listed(state.get('run_tags')) or ['all'], _listed(state.get('skip_tags'))
    files = stages_to_run({
        'error': preflight_error, 'harden_units': _listed(variables.get('harden_units')),
        'stop_units': _listed(variables.get('stop_units')), 'stop_containers': _listed(variables.get('stop_containers')),
        'free_at_start': free, 'release_done': settings['look_in_release'],
        'proved_in_release': bool(settings.get('prove_in_release')),
        'allow_reset': truth(variables.get('allow_reset')), 'check_mode': bool(state['check_mode']),
        'waits': settings['waits']}, run_tags, skip_tags)

    units = expand_units(results['units_found'].get('stdout') or '', _listed(variables.get('stop_units')),
                         _listed(variables.get('protect_units')), _listed(variables.get('unprotect')))
    units_to_stop = [unit for unit in units['running'] if unit not in keep['kept']]
    stopped_units = _stopped_units(state, units_to_stop)
    missing, running, stopped_containers = _containers(state)
    runtime = variables.get('container_runtime') or ''
    warnings = unmatched_warnings(units, state['host']) if 'stdout' in results['units_found'] else []
    if missing:
        warnings.append(missing_containers(missing, runtime, state['host'], True))

    release = results['release']
    release_failed = (not settings['look_in_release'] and bool(release) and not release.get('skipped')
                      and 'released' not in release)
    proof_ran = 'msg' in results['proof'] and not results['proof'].get('skipped')
    proof = results['proof'] if not results['proof'].get('skipped') else {}
    proof_failed = proof_ran and not results['proof'].get('free')
    if preflight_error:
        run_error = preflight_error
    elif release_failed:
        run_error = _reason(state, release)
    elif proof_failed:
        run_error = 'GPUs of %s are not free. %s' % (state['host'], results['proof'].get('msg'))
    else:
        run_error = ''
    stopped_anything = bool(stopped_units) or bool(stopped_containers)
    released_gpus = []
    for holder in release.get('released') or []:
        released_gpus.extend(gpu for gpu in holder.get('gpus') or [] if gpu not in released_gpus)
    reset = reset_stage(state['host'], int(variables.get('max_used_mib') or 0), release.get('gpus'),
                        look.get('gpus') or [], results)
    summary_files = ['summary_keep'] + (['report'] if variables.get('report_dir') else []) + (
        ['metrics'] if variables.get('metrics_textfile_dir') and not state['check_mode'] else [])
    # With the release as the look and no reset allowed, no stage can follow the release (stages_to_run: the
    # release proves the GPUs free itself, or nothing is to be proven): the look's loop keeps and saves the
    # summary too, and the stage loop has nothing to include.
    summary_in_look = (settings['look_in_release'] and not truth(variables.get('allow_reset'))
                       and not state.get('error') and not files)
    return {
        'look': look,
        'look_failed': failed_look,
        'free_at_start': free,
        'keep': keep,
        'error': preflight_error,
        'run_error': run_error,
        # What main.yml includes, in order: the look, the stages after it, the summary's keeping and saving
        # (after the last stage, or in the rescue); summary.yml, which shows it, comes after them.
        'look_files': [] if state.get('error') else (
            (['dependencies'] if settings['install'] else [])
            + (['release'] if settings['look_in_release'] else ['first_look'])
            + (['keep_found'] if _listed(variables.get('keep_units')) else [])
            + (summary_files if summary_in_look else [])),
        'stage_files': files,
        'summary_files': summary_files,
        'summary_in_look': summary_in_look,
        # The stage loop's: the stages, then the summary's keeping and saving (unless the look's loop has them).
        'run_files': files + ([] if summary_in_look else summary_files),
        'stages': {
            'keep_found': bool(_listed(variables.get('keep_units'))) and not failed_look,
            # After a stop on a host that was free, only when something was stopped; never after a failed
            # release, nor after a release that proved the GPUs free itself (stages_to_run already leaves it
            # out in check mode).
            'prove': (not release_failed and (not free or stopped_anything)
                      and not settings.get('prove_in_release')),
        },
        'units': units,
        'units_to_stop': units_to_stop,
        'stop_units_now': bool(units_to_stop),
        'stop_job': 'ansible_job_id' in results['units_stopped'],
        'stopped_units': stopped_units,
        'missing_containers': missing,
        'refuse_missing_containers': bool(missing) and not truth(variables.get('stop_ignore_missing')),
        'missing_containers_message': missing_containers(missing, runtime, state['host']) if missing else '',
        # The inspections of the running ones: the stop loops over them, and what it registers names the ids.
        'containers_to_stop': running,
        'stopped_containers': stopped_containers,
        'unit_warnings': warnings,
        'release': release,
        'release_failed': release_failed,
        'proof': proof,
        'proof_failed': proof_failed,
        'proof_allow': [str(item) for item in _listed(variables.get('allow_holders'))] + [
            str(pid) for pid in keep['pids']],
        'proof_left_alone': _listed(release.get('skipped_holders')) + _listed(release.get('protected')),
        # Where memory may still be on its way back; with a unit or container stopped first, anywhere.
        'proof_anywhere': stopped_anything,
        'proof_released_gpus': released_gpus,
        'reset': reset,
    }


def role_summary_run(state, plan, start, now):
    """The input of ``_host_summary.host_summary`` for this run (``plan`` is ``role_plan(state)``)."""
    results = proven_in_release(state.get('settings') or {},
                                dict((name, dict((state.get('results') or {}).get(name) or {})) for name in RESULTS))
    return {
        'host': state['host'], 'check_mode': bool(state['check_mode']),
        'max_used_mib': state['variables'].get('max_used_mib'),
        'first_look': plan['look'], 'free_at_start': plan['free_at_start'],
        'release': plan['release'], 'proof': plan['proof'],
        'stopped_units': plan['stopped_units'], 'stopped_containers': plan['stopped_containers'],
        'reset_gpus': plan['reset']['reset_gpus'], 'reset_errors': plan['reset']['errors'],
        'kept': plan['keep'], 'error': plan['run_error'], 'unit_warnings': plan['unit_warnings'],
        'stop_results': [results['units_stopped']] + list(results['containers_stopped'].get('results') or []),
        'start': start, 'now': now,
    }
