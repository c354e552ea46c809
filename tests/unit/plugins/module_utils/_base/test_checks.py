# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._base.checks import (
    EscalationError,
    InputError,
    SettleError,
    check_poll_interval,
    check_seconds,
    check_settle_seconds,
    check_timeout,
    check_entries,
    check_globs,
    check_lists,
    convert_seconds,
    seconds_spec,
    to_seconds,
)


@pytest.mark.parametrize('value, expected', [
    (10, 10.0), (2.5, 2.5), ('3', 3.0), (' 0.05 ', 0.05), (0, 0.0), (None, None), (-1, -1.0),
])
def test_to_seconds_takes_numbers(value, expected):
    assert to_seconds('grace_seconds', value) == expected


@pytest.mark.parametrize('value, message', [
    (True, 'grace_seconds: must be a number of seconds, not a boolean; got: True'),
    (False, 'grace_seconds: must be a number of seconds, not a boolean; got: False'),
    ('soon', "grace_seconds: must be a number of seconds; got: 'soon'"),
    ([1], 'grace_seconds: must be a number of seconds; got: [1]'),
    ({'s': 1}, "grace_seconds: must be a number of seconds; got: {'s': 1}"),
    (float('inf'), 'grace_seconds: must be a finite number of seconds; got: inf'),
    ('NaN', "grace_seconds: must be a finite number of seconds; got: 'NaN'"),
])
def test_to_seconds_refuses_what_is_no_number(value, message):
    with pytest.raises(InputError) as caught:
        to_seconds('grace_seconds', value)
    assert str(caught.value) == message


def test_convert_seconds_converts_in_place_and_names_the_first_bad_option():
    params = {'grace_seconds': '2', 'kill_seconds': True, 'poll_interval': 0.1}
    assert convert_seconds(params, ('grace_seconds', 'kill_seconds', 'absent')) == (
        'kill_seconds: must be a number of seconds, not a boolean; got: True')
    assert params['grace_seconds'] == 2.0


def test_convert_seconds_all_good():
    params = {'nvml_timeout': '5'}
    assert convert_seconds(params, ('nvml_timeout',)) is None and params == {'nvml_timeout': 5.0}


def test_seconds_spec_is_raw():
    assert seconds_spec(10.0) == {'type': 'raw', 'default': 10.0}


# Security: an entry that names nothing, or a glob fnmatch would read otherwise, fails before anything is done.
@pytest.mark.parametrize('option, values, message', [
    ('allow', [''], "allow[0]: must not be empty; got: ''"),
    ('users', ['root', '  '], "users[1]: must not be empty; got: '  '"),
    ('gpus', [None], 'gpus[0]: must not be empty; got: None'),
])
def test_an_empty_entry_of_a_list_is_an_error(option, values, message):
    with pytest.raises(InputError) as caught:
        check_entries(option, values)
    assert str(caught.value) == message


@pytest.mark.parametrize('pattern', ['[', 'dcgm[', 'a[!', 'a[]', 'x[!]', 'ok*[z'])
def test_a_glob_with_an_unclosed_bracket_is_an_error(pattern):
    with pytest.raises(InputError) as caught:
        check_globs('protect', ['fine', pattern])
    assert str(caught.value).startswith("protect[1]: the glob %r opens a '[' at " % pattern)
    assert 'never closed' in str(caught.value)


@pytest.mark.parametrize('pattern', ['dcgm*', '[[]x', 'nv-[a-z]*', 'a[]]b', 'x[!]]', '?', 'plain.service'])
def test_usable_globs_pass(pattern):
    check_globs('protect', [pattern])


def test_check_lists_checks_every_list_and_the_globs_among_them():
    assert check_lists({'allow': ['x'], 'protect': ['dcgm*'], 'ladder': [{'signal': 'SIGTERM'}]},
                       globs=('protect',)) is None
    assert check_lists({'allow': ['']}, globs=()) == "allow[0]: must not be empty; got: ''"
    assert 'protect[0]: the glob' in check_lists({'protect': ['[']}, globs=('protect',))
    # Not a glob option: '[' is a name like any other.
    assert check_lists({'allow': ['[']}, globs=('protect',)) is None


def test_check_seconds_raises_the_error_it_is_given():
    class OptionError(ValueError):
        pass

    with pytest.raises(OptionError, match='settle_seconds: must be a number of seconds from 0 to 600; got: 601'):
        check_seconds('settle_seconds', 601, maximum=600, error=OptionError)
    with pytest.raises(EscalationError, match='wait: must be a number'):
        check_seconds('wait', float('nan'))


@pytest.mark.parametrize('value, ok', [(0, True), (2, True), (600, True), (-1, False), (601, False),
                                       ('x', False), (True, False), (float('nan'), False)])
def test_check_settle_seconds(value, ok):
    if ok:
        assert check_settle_seconds(value) == float(value)
    else:
        with pytest.raises(SettleError, match=r'^settle_seconds: must be a number of seconds from 0 to 600; got: '):
            check_settle_seconds(value)


@pytest.mark.parametrize('value, ok', [
    (5.0, True), (0.05, True), (600, True), (0, False), (-1, False), (601, False), (float('nan'), False),
    (None, False),
])
def test_check_timeout(value, ok):
    message = check_timeout(value)
    if ok:
        assert message is None
    else:
        assert message == 'nvml_timeout must be greater than 0 and at most 600 seconds; got: %r' % (value,)


@pytest.mark.parametrize('value, ok', [(0.05, True), (0.005, True), (0, False), (-1, False), (10, False)])
def test_poll_interval(value, ok):
    if ok:
        assert check_poll_interval(value) == value
    else:
        with pytest.raises(EscalationError, match='poll_interval: must be'):
            check_poll_interval(value)
