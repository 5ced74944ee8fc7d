//! envoyproxy/ratelimit's config test files (test/config/*.yaml at
//! f2fb157, copied verbatim) with the expectations of its config_test.go,
//! the README's examples, and rategate's own cases.

use super::*;

const BASIC_CONFIG: &str = r#"# Basic configuration for testing.
domain: test-domain
descriptors:
  # Top level key/value with no default rate limit.
  - key: key1
    value: value1
    descriptors:
      # 2nd level key only with default rate limit.
      - key: subkey1
        rate_limit:
          unit: second
          requests_per_unit: 5

      # 2nd level key/value with limit. Specific override at 2nd level.
      - key: subkey1
        value: subvalue1
        rate_limit:
          unit: second
          requests_per_unit: 10

  # Top level key only with default rate limit.
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20

  # Top level key/value with limit. Specific override at 1st level.
  - key: key2
    value: value2
    rate_limit:
      unit: minute
      requests_per_unit: 30

  # First level override with no limit. This effectively whitelists the value.
  - key: key2
    value: value3

  - key: key3
    rate_limit:
      unit: hour
      requests_per_unit: 1

  - key: key4
    rate_limit:
      name: key4_rate_limit
      unit: day
      requests_per_unit: 1

  - key: key5
    value: value5
    rate_limit:
      unit: day
      requests_per_unit: 15
    descriptors:
      - key: subkey5
        value: subvalue5
        rate_limit:
          unit: day
          requests_per_unit: 25

  - key: key6
    rate_limit:
      unlimited: true

  # Top level key only with default rate limit.

  - key: key7
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 70
"#;

const WILDCARD: &str = r#"# Basic configuration for testing.
domain: test-domain
descriptors:
  - key: wild
    value: foo*
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: noWild
    value: foo
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: noVal
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: midWild
    value: bar*b
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: multiWild
    value: foo*bar*baz
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: nestedWild
    value: val1
    descriptors:
      - key: wild
        value: goo*
        rate_limit:
          unit: minute
          requests_per_unit: 20
"#;

const SHADOWMODE_CONFIG: &str = r#"# Basic configuration for testing.
domain: test-domain
descriptors:
  # Top level key/value with no default rate limit.
  - key: key1
    value: value1
    descriptors:
      # 2nd level key only with default rate limit.
      - key: subkey1
        rate_limit:
          unit: second
          requests_per_unit: 5

      # 2nd level key/value with limit. Specific override at 2nd level.
      - key: subkey1
        value: subvalue1
        rate_limit:
          unit: second
          requests_per_unit: 10
        shadow_mode: true

  # Top level key only with default rate limit.
  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20
    shadow_mode: true
  # Top level key/value with limit. Specific override at 1st level.
  - key: key2
    value: value2
    rate_limit:
      unit: minute
      requests_per_unit: 30
"#;

const SHARE_THRESHOLD: &str = r#"# Configuration for testing share_threshold feature
domain: test-domain
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 100
  - key: nested
    value: parent
    descriptors:
      - key: files
        value: nested/*
        share_threshold: true
        rate_limit:
          unit: minute
          requests_per_unit: 200
  # Test case for nested descriptors with same key name at different levels
  - key: files
    value: top/*
    share_threshold: true
    descriptors:
      - key: files
        value: nested/*
        share_threshold: true
        rate_limit:
          unit: minute
          requests_per_unit: 300
  # Test case for share_threshold with value_to_metric
  - key: route
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit:
          unit: minute
          requests_per_unit: 60
  # Test case for share_threshold with detailed_metric
  - key: service
    value: svc/*
    share_threshold: true
    descriptors:
      - key: endpoint
        detailed_metric: true
        rate_limit:
          unit: minute
          requests_per_unit: 80
  # Test case for nested descriptors with multiple wildcards - mixed share_threshold
  - key: path
    value: path/*
    share_threshold: true
    descriptors:
      - key: file
        value: file/*
        share_threshold: false
        descriptors:
          - key: type
            rate_limit:
              unit: minute
              requests_per_unit: 120
  # Test case for nested descriptors with multiple wildcards - both with share_threshold
  - key: user
    value: user/*
    share_threshold: true
    descriptors:
      - key: resource
        value: res/*
        share_threshold: true
        descriptors:
          - key: action
            rate_limit:
              unit: minute
              requests_per_unit: 150
  # Test case: explicit value takes precedence over wildcard with share_threshold
  - key: file
    value: test1
    rate_limit:
      unit: minute
      requests_per_unit: 50
  - key: file
    value: test*
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 100
  # Test case: share_threshold with middle wildcard (single *)
  - key: midpath
    value: /api*v1
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 100
  # Test case: share_threshold with multi-wildcard (multiple *)
  - key: multiroute
    value: svc*ep*rpc
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 50
  # Test case: share_threshold with middle wildcard + value_to_metric (share_threshold takes priority)
  - key: midroute
    value: /api*v2
    share_threshold: true
    value_to_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 80
  # Test case: share_threshold with middle wildcard nested
  - key: tenant
    value: t*prod
    share_threshold: true
    descriptors:
      - key: resource
        value: res*v2
        share_threshold: true
        rate_limit:
          unit: minute
          requests_per_unit: 60
"#;

const METADATA: &str = r#"domain: test-domain
descriptors:
  # Top level key/value with no default rate limit.
  - key: key1
    value: value1
    descriptors:
      # 2nd level key only with default rate limit.
      - key: subkey1
        rate_limit:
          unit: second
          requests_per_unit: 5
        metadata:
          name: service_1

      # 2nd level key/value with limit. Specific override at 2nd level.
      - key: subkey1
        value: subvalue1
        rate_limit:
          unit: second
          requests_per_unit: 10

  - key: key2
    rate_limit:
      unit: minute
      requests_per_unit: 20
    metadata:
      service_with_quota:
        name: service_2
"#;

const MERGE_DOMAIN_KEY1: &str = r#"# Basic configuration which will be merged with `merge_domain2.yaml`
domain: test-domain
descriptors:
  # Top level key/value which is not specified in `merge_domain2.yaml`
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 10
"#;

const MERGE_DOMAIN_KEY2: &str = r#"# Basic configuration which will be merged with `merge_domain.yaml`
domain: test-domain
descriptors:
  # Top level key/value which is not specified in `merge_domain.yaml`
  - key: key2
    value: value2
    rate_limit:
      unit: minute
      requests_per_unit: 20
"#;

/// The error cases of envoyproxy's test/config: file name, content.
const BAD_LIMIT_UNIT: &str = "domain: test-domain
descriptors:
  - key: key1
    value: value1
    rate_limit:
      unit: foo
      requests_per_unit: 5
";
const BAD_YAML: &str = "'''\n";
const DUPLICATE_DOMAIN: &str = "domain: test-domain\ndescriptors:\n";
const DUPLICATE_KEY: &str = "domain: test-domain
descriptors:
  - key: key1
    value: value1

  - key: key1
    value: value1
";
const EMPTY_DOMAIN: &str = "descriptors:\n";
const EMPTY_KEY: &str = "domain: test-domain\ndescriptors:\n  - value: value1\n";
const MISSPELLED_KEY: &str = "domain: test-domain
descriptors:
  - key: key1
    value: value1
    ratelimit:
      unit: day
      requests_per_unit: 5
";
const MISSPELLED_KEY2: &str = "domain: test-domain
descriptors:
  - key: key1
    value: value1
    rate_limit:
      unit: day
      requestsperunit: 5
";
const NON_MAP_LIST: &str = "domain: test-domain\ndescriptors:\n  - a\n  - b\n  - c\n";
const NON_STRING_KEY: &str = "0.25: test-domain
descriptors:
  - key: key1
    value: value1
    rate_limit:
      unit: day
      requests_per_unit: 5
";
const REPLACES_EMPTY: &str = "domain: test-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit:
          name: self
          replaces:
            - name:
          unit: second
          requests_per_unit: 5
";
const REPLACES_SELF: &str = "domain: test-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit:
          name: self
          replaces:
            - name: self
          unit: second
          requests_per_unit: 5
";
const UNLIMITED_WITH_UNIT: &str = "domain: test-domain
descriptors:
  - key: foo
    rate_limit:
      unlimited: true
      unit: day
      requests_per_unit: 25
";

fn load(sources: &[(&str, &str)], merge: bool) -> Config {
    Config::from_sources(sources, merge).unwrap_or_else(|e| panic!("{e}"))
}

fn one(text: &str) -> Config {
    load(&[("test.yaml", text)], false)
}

fn error(sources: &[(&str, &str)], merge: bool) -> ConfigError {
    match Config::from_sources(sources, merge) {
        Ok(config) => panic!("loaded: {config:?}"),
        Err(e) => e,
    }
}

fn error_of(text: &str) -> String {
    error(&[("test.yaml", text)], false).to_string()
}

/// `(requests_per_unit, unit)` of the match, or `None`.
fn limit(config: &Config, domain: &str, entries: &[(&str, &str)]) -> Option<(u32, Option<Unit>)> {
    let m = config.domain(domain)?.matching(entries)?;
    Some((m.rule.requests_per_unit, m.rule.unit))
}

fn key(config: &Config, domain: &str, entries: &[(&str, &str)]) -> String {
    let domain = config.domain(domain).unwrap();
    domain.matching(entries).unwrap().counter_key
}

#[test]
fn envoy_error_cases() {
    let cases = [
        (
            "bad_limit_unit.yaml",
            BAD_LIMIT_UNIT,
            "bad_limit_unit.yaml: invalid rate limit unit 'foo'",
        ),
        (
            "duplicate_key.yaml",
            DUPLICATE_KEY,
            "duplicate_key.yaml: duplicate descriptor composite key 'test-domain.key1_value1'",
        ),
        (
            "empty_domain.yaml",
            EMPTY_DOMAIN,
            "empty_domain.yaml: config file cannot have empty domain",
        ),
        (
            "empty_key.yaml",
            EMPTY_KEY,
            "empty_key.yaml: descriptor has empty key",
        ),
        (
            "misspelled_key.yaml",
            MISSPELLED_KEY,
            "misspelled_key.yaml: config error, unknown key 'ratelimit'",
        ),
        (
            "misspelled_key2.yaml",
            MISSPELLED_KEY2,
            "misspelled_key2.yaml: config error, unknown key 'requestsperunit'",
        ),
        (
            "non_map_list.yaml",
            NON_MAP_LIST,
            "non_map_list.yaml: config error, yaml file contains list of type other than map: a",
        ),
        (
            "non_string_key.yaml",
            NON_STRING_KEY,
            "non_string_key.yaml: config error, key is not of type string: 0.25",
        ),
        (
            "replaces_empty.yaml",
            REPLACES_EMPTY,
            "replaces_empty.yaml: should not have an empty replaces entry",
        ),
        (
            "replaces_self.yaml",
            REPLACES_SELF,
            "replaces_self.yaml: replaces should not contain name of same descriptor",
        ),
        (
            "unlimited_with_unit.yaml",
            UNLIMITED_WITH_UNIT,
            "unlimited_with_unit.yaml: should not specify rate limit unit when unlimited",
        ),
    ];
    for (name, text, expected) in cases {
        let err = error(&[(name, text)], false);
        assert_eq!(err.to_string(), expected);
        assert_eq!(err.file(), name);
        assert!(!err.is_io());
    }
}

#[test]
fn envoy_error_cases_across_files() {
    let err = error(
        &[
            ("basic_config.yaml", BASIC_CONFIG),
            ("duplicate_domain.yaml", DUPLICATE_DOMAIN),
        ],
        false,
    );
    assert_eq!(
        err.to_string(),
        "duplicate_domain.yaml: duplicate domain 'test-domain' in config file"
    );
    let err = error(
        &[
            ("merge_domain_key1.yaml", MERGE_DOMAIN_KEY1),
            ("merge_domain_key1.yaml", MERGE_DOMAIN_KEY1),
        ],
        true,
    );
    assert_eq!(
        err.to_string(),
        "merge_domain_key1.yaml: duplicate descriptor composite key 'test-domain.key1_value1'"
    );
    // The YAML parser's own text differs from yaml.v2's; the prefix is
    // envoyproxy's.
    let err = error(&[("bad_yaml.yaml", BAD_YAML)], false).to_string();
    assert!(
        err.starts_with("bad_yaml.yaml: error loading config file: "),
        "{err}"
    );
    let share =
        "domain: d\ndescriptors:\n  - key: file\n    value: test1\n    share_threshold: true\n";
    assert_eq!(
        error_of(share),
        "test.yaml: share_threshold can only be used with wildcard values (containing '*'), \
         but found key 'file_test1'"
    );
}

#[test]
fn error_places() {
    let err = error(&[("x.yaml", MISSPELLED_KEY2)], false);
    assert_eq!(err.place(), Some("descriptors[0].rate_limit"));
    assert_eq!(err.message(), "config error, unknown key 'requestsperunit'");
    let err = error(&[("x.yaml", REPLACES_SELF)], false);
    assert_eq!(
        err.place(),
        Some("descriptors[0].descriptors[0].rate_limit")
    );
    let err = error(&[("x.yaml", EMPTY_DOMAIN)], false);
    assert_eq!(err.place(), None);
}

#[test]
fn merged_domains() {
    let config = load(
        &[
            ("merge_domain_key1.yaml", MERGE_DOMAIN_KEY1),
            ("merge_domain_key2.yaml", MERGE_DOMAIN_KEY2),
        ],
        true,
    );
    let d = "test-domain";
    assert_eq!(
        limit(&config, d, &[("key1", "value1")]),
        Some((10, Some(Unit::Minute)))
    );
    assert_eq!(
        limit(&config, d, &[("key2", "value2")]),
        Some((20, Some(Unit::Minute)))
    );
    assert_eq!(config.domains().count(), 1);
    let err = error(
        &[
            ("merge_domain_key1.yaml", MERGE_DOMAIN_KEY1),
            ("merge_domain_key2.yaml", MERGE_DOMAIN_KEY2),
        ],
        false,
    );
    assert_eq!(
        err.to_string(),
        "merge_domain_key2.yaml: duplicate domain 'test-domain' in config file"
    );
}

#[test]
fn basic_config_vectors() {
    let config = one(BASIC_CONFIG);
    let d = "test-domain";
    let second = |n| Some((n, Some(Unit::Second)));
    let minute = |n| Some((n, Some(Unit::Minute)));
    assert_eq!(limit(&config, "foo_domain", &[]), None);
    assert_eq!(limit(&config, "foo_domain", &[("key1", "value1")]), None);
    assert_eq!(limit(&config, d, &[]), None);
    assert_eq!(limit(&config, d, &[("key1", "something")]), None);
    assert_eq!(limit(&config, d, &[("key1", "value1")]), None);
    assert_eq!(
        limit(&config, d, &[("key2", "value2"), ("subkey", "subvalue")]),
        None
    );
    assert_eq!(
        limit(&config, d, &[("key5", "value5"), ("subkey5", "subvalue")]),
        None
    );
    assert_eq!(
        limit(&config, d, &[("key1", "value1"), ("subkey1", "something")]),
        second(5)
    );
    assert_eq!(
        limit(&config, d, &[("key1", "value1"), ("subkey1", "subvalue1")]),
        second(10)
    );
    assert_eq!(limit(&config, d, &[("key2", "something")]), minute(20));
    assert_eq!(limit(&config, d, &[("key2", "value2")]), minute(30));
    assert_eq!(limit(&config, d, &[("key2", "value3")]), None);
    assert_eq!(
        limit(&config, d, &[("key3", "foo")]),
        Some((1, Some(Unit::Hour)))
    );
    let domain = config.domain(d).unwrap();
    let key3 = domain.matching(&[("key3", "foo")]).unwrap();
    assert_eq!(key3.rule.name, None);
    let key4 = domain.matching(&[("key4", "foo")]).unwrap();
    assert_eq!(
        (key4.rule.requests_per_unit, key4.rule.unit),
        (1, Some(Unit::Day))
    );
    assert_eq!(key4.rule.name.as_deref(), Some("key4_rate_limit"));
    let key6 = domain.matching(&[("key6", "foo")]).unwrap();
    assert!(key6.rule.unlimited);
    assert_eq!(key6.rule.unit, None);
    let key7 = domain.matching(&[("key7", "any")]).unwrap();
    assert_eq!(
        (key7.rule.requests_per_unit, key7.rule.unit),
        (70, Some(Unit::Minute))
    );
    assert!(key7.rule.detailed_metric);
    // An intermediate node's rule holds for a request that stops there.
    assert_eq!(
        limit(&config, d, &[("key5", "value5")]),
        Some((15, Some(Unit::Day)))
    );
    assert_eq!(
        limit(&config, d, &[("key5", "value5"), ("subkey5", "subvalue5")]),
        Some((25, Some(Unit::Day)))
    );
    // Deeper than the rule: no limit.
    assert_eq!(
        limit(&config, d, &[("key2", "value2"), ("key3", "x")]),
        None
    );
    let sub = domain.matching(&[("key1", "value1"), ("subkey1", "x")]);
    assert_eq!(sub.unwrap().rule.path, "test-domain.key1_value1.subkey1");
    // Defaults: fixed window, no burst, not shadow.
    assert_eq!(key3.rule.algorithm, AlgorithmKind::FixedWindow);
    assert_eq!(key3.rule.burst, None);
    assert!(!key3.rule.shadow_mode);
}

#[test]
fn wildcard_vectors() {
    let config = one(WILDCARD);
    let d = "test-domain";
    let minute = |n| Some((n, Some(Unit::Minute)));
    for value in ["foo1", "foo2"] {
        assert_eq!(limit(&config, d, &[("noVal", value)]), minute(20));
        assert_eq!(limit(&config, d, &[("wild", value)]), minute(20));
        assert_eq!(limit(&config, d, &[("noWild", value)]), None);
    }
    assert_eq!(
        limit(&config, d, &[("nestedWild", "val1"), ("wild", "goo2")]),
        minute(20)
    );
    assert_eq!(limit(&config, d, &[("wild", "bar")]), None);
    for value in ["barab", "bar123b", "barb"] {
        assert_eq!(limit(&config, d, &[("midWild", value)]), minute(20));
    }
    for value in ["bara", "xbarb"] {
        assert_eq!(limit(&config, d, &[("midWild", value)]), None);
    }
    for value in ["foo123bar456baz", "foobarbaz"] {
        assert_eq!(limit(&config, d, &[("multiWild", value)]), minute(10));
    }
    for value in ["foo123baz", "bar456baz"] {
        assert_eq!(limit(&config, d, &[("multiWild", value)]), None);
    }
    // Each value its own counter without share_threshold.
    assert_eq!(key(&config, d, &[("wild", "foo1")]), "wild_foo1");
    assert_eq!(key(&config, d, &[("wild", "foo2")]), "wild_foo2");
}

#[test]
fn shadow_mode_vectors() {
    let config = one(SHADOWMODE_CONFIG);
    let domain = config.domain("test-domain").unwrap();
    let rule = |entries: &[(&str, &str)]| domain.matching(entries).unwrap().rule;
    let r = rule(&[("key1", "value1"), ("subkey1", "x")]);
    assert_eq!(
        (r.requests_per_unit, r.unit, r.shadow_mode),
        (5, Some(Unit::Second), false)
    );
    let r = rule(&[("key1", "value1"), ("subkey1", "subvalue1")]);
    assert_eq!(
        (r.requests_per_unit, r.unit, r.shadow_mode),
        (10, Some(Unit::Second), true)
    );
    let r = rule(&[("key2", "x")]);
    assert_eq!(
        (r.requests_per_unit, r.unit, r.shadow_mode),
        (20, Some(Unit::Minute), true)
    );
    let r = rule(&[("key2", "value2")]);
    assert_eq!(
        (r.requests_per_unit, r.unit, r.shadow_mode),
        (30, Some(Unit::Minute), false)
    );
}

#[test]
fn share_threshold_counter_keys() {
    let config = one(SHARE_THRESHOLD);
    let d = "test-domain";
    let minute = |n| Some((n, Some(Unit::Minute)));
    for value in ["files/a.pdf", "files/b.csv", "files/c.txt"] {
        assert_eq!(limit(&config, d, &[("files", value)]), minute(100));
        assert_eq!(key(&config, d, &[("files", value)]), "files_files/*");
    }
    let nested = [("nested", "parent"), ("files", "nested/file1.txt")];
    assert_eq!(limit(&config, d, &nested), minute(200));
    assert_eq!(key(&config, d, &nested), "nested_parent_files_nested/*");
    let both = [("files", "top/file1.txt"), ("files", "nested/file1.txt")];
    assert_eq!(limit(&config, d, &both), minute(300));
    assert_eq!(key(&config, d, &both), "files_top/*_files_nested/*");
    // The pattern stands for its entry only; a key-only child keeps the
    // request's value.
    let route = [("route", "api/v1"), ("method", "GET")];
    assert_eq!(limit(&config, d, &route), minute(60));
    assert_eq!(key(&config, d, &route), "route_api/*_method_GET");
    let mixed = [("path", "path/foo"), ("file", "file/doc1"), ("type", "pdf")];
    assert_eq!(limit(&config, d, &mixed), minute(120));
    assert_eq!(
        key(&config, d, &mixed),
        "path_path/*_file_file/doc1_type_pdf"
    );
    let user = [
        ("user", "user/alice"),
        ("resource", "res/file1"),
        ("action", "read"),
    ];
    assert_eq!(limit(&config, d, &user), minute(150));
    assert_eq!(
        key(&config, d, &user),
        "user_user/*_resource_res/*_action_read"
    );
    // The exact value wins over the wildcard, with its own counter.
    assert_eq!(limit(&config, d, &[("file", "test1")]), minute(50));
    assert_eq!(key(&config, d, &[("file", "test1")]), "file_test1");
    for value in ["test2", "test23", "test123"] {
        assert_eq!(limit(&config, d, &[("file", value)]), minute(100));
        assert_eq!(key(&config, d, &[("file", value)]), "file_test*");
    }
    for value in ["/api/v1", "/api-beta-v1", "/apiXYZv1"] {
        assert_eq!(key(&config, d, &[("midpath", value)]), "midpath_/api*v1");
    }
    assert_eq!(limit(&config, d, &[("midpath", "/api/v2")]), None);
    for value in ["svcAepBrpc", "svcXXXepYYYrpc", "svceprpc"] {
        assert_eq!(limit(&config, d, &[("multiroute", value)]), minute(50));
        assert_eq!(
            key(&config, d, &[("multiroute", value)]),
            "multiroute_svc*ep*rpc"
        );
    }
    assert_eq!(limit(&config, d, &[("multiroute", "svcABCrpc")]), None);
    let tenant = [("tenant", "t1prod"), ("resource", "resAv2")];
    let tenant2 = [("tenant", "t99prod"), ("resource", "resBBBv2")];
    assert_eq!(limit(&config, d, &tenant), minute(60));
    assert_eq!(key(&config, d, &tenant), "tenant_t*prod_resource_res*v2");
    assert_eq!(key(&config, d, &tenant), key(&config, d, &tenant2));
}

#[test]
fn counter_keys_per_value_and_unambiguous() {
    let config = one(BASIC_CONFIG);
    let d = "test-domain";
    assert_eq!(key(&config, d, &[("key2", "a")]), "key2_a");
    assert_ne!(
        key(&config, d, &[("key2", "a")]),
        key(&config, d, &[("key2", "b")])
    );
    assert_eq!(
        key(&config, d, &[("key1", "value1"), ("subkey1", "x")]),
        "key1_value1_subkey1_x"
    );
    // `_` and `\` inside a key or value are escaped.
    let yaml = "domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: a_b
    rate_limit: {unit: second, requests_per_unit: 2}
";
    let config = one(yaml);
    let k1 = key(&config, "d", &[("a", "b_c")]);
    let k2 = key(&config, "d", &[("a_b", "c")]);
    assert_eq!(k1, "a_b\\_c");
    assert_eq!(k2, "a\\_b_c");
    assert_eq!(key(&config, "d", &[("a", "x\\")]), "a_x\\\\");
    // A two-entry request cannot name a one-entry request's counter.
    let nested = "domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 1}
";
    let config2 = one(nested);
    assert_ne!(key(&config2, "d", &[("a", "b"), ("b", "c")]), k1);
}

#[test]
fn composite_key_is_a_pair() {
    // envoyproxy joins these into `a_b_c` and refuses the second.
    let yaml = "domain: d
descriptors:
  - key: a
    value: b_c
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: a_b
    value: c
    rate_limit: {unit: second, requests_per_unit: 2}
";
    let config = one(yaml);
    assert_eq!(
        limit(&config, "d", &[("a", "b_c")]),
        Some((1, Some(Unit::Second)))
    );
    assert_eq!(
        limit(&config, "d", &[("a_b", "c")]),
        Some((2, Some(Unit::Second)))
    );
    // The key-only node and a valued one of the same key are two nodes.
    let yaml = "domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    value: b
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: a
";
    assert_eq!(
        error_of(yaml),
        "test.yaml: duplicate descriptor composite key 'd.a'"
    );
}

#[test]
fn wildcard_matches_the_value_under_its_key_only() {
    // envoyproxy's `a_b*` would also catch key `a_b`, value `x`.
    let yaml = "domain: d
descriptors:
  - key: a
    value: b*
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k*
    rate_limit: {unit: second, requests_per_unit: 2}
";
    let config = one(yaml);
    assert_eq!(
        limit(&config, "d", &[("a", "bcd")]),
        Some((1, Some(Unit::Second)))
    );
    assert_eq!(limit(&config, "d", &[("a_b", "x")]), None);
    // A `*` in a key is literal.
    assert_eq!(limit(&config, "d", &[("kx", "1")]), None);
    assert_eq!(
        limit(&config, "d", &[("k*", "1")]),
        Some((2, Some(Unit::Second)))
    );
    // The first matching wildcard in document order wins.
    let yaml = "domain: d
descriptors:
  - key: p
    value: ab*
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: p
    value: a*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: p
    rate_limit: {unit: second, requests_per_unit: 3}
";
    let config = one(yaml);
    assert_eq!(
        limit(&config, "d", &[("p", "abc")]),
        Some((1, Some(Unit::Second)))
    );
    assert_eq!(
        limit(&config, "d", &[("p", "ac")]),
        Some((2, Some(Unit::Second)))
    );
    assert_eq!(
        limit(&config, "d", &[("p", "zz")]),
        Some((3, Some(Unit::Second)))
    );
    // A request carrying the pattern's own text finds it exactly.
    assert_eq!(
        limit(&config, "d", &[("p", "a*")]),
        Some((2, Some(Unit::Second)))
    );
}

#[test]
fn no_backtracking() {
    let yaml = "domain: d
descriptors:
  - key: a
    value: x
    descriptors:
      - key: b
        value: only
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 2}
";
    let config = one(yaml);
    assert_eq!(limit(&config, "d", &[("a", "x"), ("b", "other")]), None);
    assert_eq!(
        limit(&config, "d", &[("a", "y"), ("b", "other")]),
        Some((2, Some(Unit::Second)))
    );
}

#[test]
fn metadata_is_accepted() {
    let config = one(METADATA);
    let d = "test-domain";
    assert_eq!(
        limit(&config, d, &[("key1", "value1"), ("subkey1", "x")]),
        Some((5, Some(Unit::Second)))
    );
    assert_eq!(
        limit(&config, d, &[("key2", "x")]),
        Some((20, Some(Unit::Minute)))
    );
}

#[test]
fn readme_examples() {
    let ex1 = "domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
";
    let c = one(ex1);
    let d = "mongo_cps";
    assert_eq!(
        limit(&c, d, &[("database", "users")]),
        Some((500, Some(Unit::Second)))
    );
    assert_eq!(
        limit(&c, d, &[("database", "default")]),
        Some((500, Some(Unit::Second)))
    );
    assert_ne!(
        key(&c, d, &[("database", "users")]),
        key(&c, d, &[("database", "default")])
    );
    assert_eq!(limit(&c, d, &[("database", "other")]), None);

    let ex2 = "domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5

  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
";
    let c = one(ex2);
    let d = "messaging";
    let marketing = [("message_type", "marketing"), ("to_number", "2061111111")];
    assert_eq!(limit(&c, d, &marketing), Some((5, Some(Unit::Day))));
    let other = [("message_type", "marketing"), ("to_number", "2062222222")];
    assert_ne!(key(&c, d, &marketing), key(&c, d, &other));
    assert_eq!(
        limit(&c, d, &[("to_number", "2061111111")]),
        Some((100, Some(Unit::Day)))
    );
    assert_ne!(
        key(&c, d, &[("to_number", "1")]),
        key(&c, d, &[("to_number", "2")])
    );
    assert_eq!(limit(&c, d, &[("message_type", "marketing")]), None);

    let ex3 = "domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10

  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
";
    let c = one(ex3);
    let d = "edge_proxy_per_ip";
    assert_eq!(
        limit(&c, d, &[("remote_address", "50.0.0.1")]),
        Some((10, Some(Unit::Second)))
    );
    assert_eq!(
        limit(&c, d, &[("remote_address", "50.0.0.5")]),
        Some((0, Some(Unit::Second)))
    );

    let request4 = [("key", "value"), ("subkey", "subvalue")];
    let ex4a = "domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
";
    assert_eq!(limit(&one(ex4a), "example4", &request4), None);
    let ex4b = "domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
";
    assert_eq!(
        limit(&one(ex4b), "example4", &request4),
        Some((300, Some(Unit::Second)))
    );

    let ex5 = "domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true

  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
";
    let c = one(ex5);
    let ldap = c
        .domain("internal")
        .unwrap()
        .matching(&[("ldap", "x")])
        .unwrap();
    assert!(ldap.rule.unlimited);
    assert_eq!(
        limit(&c, "internal", &[("azure", "x")]),
        Some((100, Some(Unit::Minute)))
    );

    let ex6 = "domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
";
    let c = one(ex6);
    let d = c.domain("example6").unwrap();
    let a = d
        .matching(&[("service", "auth-service"), ("user", "user-a")])
        .unwrap();
    assert_eq!((a.rule.requests_per_unit, a.rule.shadow_mode), (10, true));
    let b = d
        .matching(&[("service", "auth-service"), ("user", "user-b")])
        .unwrap();
    assert_eq!((b.rule.requests_per_unit, b.rule.shadow_mode), (20, false));

    let ex7 = "domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
";
    let c = one(ex7);
    let d = c.domain("example7").unwrap();
    let r1 = d
        .matching(&[("key_1", "value_1"), ("user", "bkthomps")])
        .unwrap();
    assert_eq!(r1.rule.requests_per_unit, 5);
    assert_eq!(r1.rule.name.as_deref(), Some("specific_limit"));
    let r2 = d
        .matching(&[("key_2", "value_2"), ("user", "bkthomps")])
        .unwrap();
    assert_eq!(r2.rule.requests_per_unit, 10);
    assert_eq!(r2.rule.replaces, ["specific_limit"]);
    // Both in one request: the 5/s one is named by the other's replaces.
    assert!(r2.rule.replaces.contains(r1.rule.name.as_ref().unwrap()));

    let ex8 = "domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
";
    let c = one(ex8);
    assert_eq!(
        limit(&c, "example8", &[("key1", "any")]),
        Some((10, Some(Unit::Minute)))
    );
    assert_eq!(
        limit(&c, "example8", &[("key1", "value1")]),
        Some((20, Some(Unit::Minute)))
    );

    let ex9a = "domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
";
    let c = one(ex9a);
    for value in ["value1", "value2", "valueXYZ"] {
        assert_eq!(
            limit(&c, "example9", &[("key1", value)]),
            Some((20, Some(Unit::Minute)))
        );
    }
    assert_ne!(
        key(&c, "example9", &[("key1", "value1")]),
        key(&c, "example9", &[("key1", "value2")])
    );
    let ex9b = "domain: example9
descriptors:
  - key: path
    value: /api/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
";
    let c = one(ex9b);
    assert_eq!(
        limit(&c, "example9", &[("path", "/api/123/action")]),
        Some((20, Some(Unit::Minute)))
    );
    assert_eq!(limit(&c, "example9", &[("path", "/api/123/other")]), None);
    let ex9c = "domain: example9
descriptors:
  - key: route
    value: /api/*/resource/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
";
    let c = one(ex9c);
    let route = [("route", "/api/v1/resource/123/action")];
    assert_eq!(
        limit(&c, "example9", &route),
        Some((20, Some(Unit::Minute)))
    );

    let ex10 = "domain: example10
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit:
              unit: minute
              requests_per_unit: 60
";
    let c = one(ex10);
    let request = [
        ("route", "api"),
        ("http_method", "GET"),
        ("subject_id", "123"),
    ];
    assert_eq!(
        limit(&c, "example10", &request),
        Some((60, Some(Unit::Minute)))
    );
    let ex10w = "domain: example10_wildcard
descriptors:
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit:
              unit: minute
              requests_per_unit: 100
";
    let c = one(ex10w);
    let request = [
        ("user", "alice"),
        ("action", "readfile"),
        ("resource", "documents"),
    ];
    assert_eq!(
        limit(&c, "example10_wildcard", &request),
        Some((100, Some(Unit::Minute)))
    );

    let ex11 = "domain: example11
descriptors:
  # With share_threshold: true, all files/* matches share the same threshold
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 10

  # Without share_threshold, each files_no_share/* match has its own isolated threshold
  - key: files_no_share
    value: files_no_share/*
    share_threshold: false
    rate_limit:
      unit: hour
      requests_per_unit: 10
";
    let c = one(ex11);
    let d = "example11";
    assert_eq!(
        limit(&c, d, &[("files", "files/a.pdf")]),
        Some((10, Some(Unit::Hour)))
    );
    assert_eq!(
        key(&c, d, &[("files", "files/a.pdf")]),
        key(&c, d, &[("files", "files/c.txt")])
    );
    let a = key(&c, d, &[("files_no_share", "files_no_share/a.pdf")]);
    let b = key(&c, d, &[("files_no_share", "files_no_share/b.csv")]);
    assert_ne!(a, b);
    let ex11m = "domain: example11_metrics
descriptors:
  - key: route
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit:
          unit: minute
          requests_per_unit: 60
";
    let c = one(ex11m);
    let d = "example11_metrics";
    let v1 = [("route", "api/v1"), ("method", "GET")];
    let v2 = [("route", "api/v2"), ("method", "GET")];
    let post = [("route", "api/v2"), ("method", "POST")];
    assert_eq!(limit(&c, d, &v1), Some((60, Some(Unit::Minute))));
    assert_eq!(key(&c, d, &v1), key(&c, d, &v2));
    assert_ne!(key(&c, d, &v1), key(&c, d, &post));
}

#[test]
fn units() {
    let seconds: Vec<u64> = Unit::ALL.iter().map(|u| u.seconds()).collect();
    assert_eq!(seconds, [1, 60, 3600, 86400, 604800, 2592000, 31536000]);
    let numbers: Vec<i32> = Unit::ALL.iter().map(|u| u.number()).collect();
    assert_eq!(numbers, [1, 2, 3, 4, 7, 5, 6]);
    for unit in Unit::ALL {
        assert_eq!(Unit::from_number(unit.number()), Some(unit));
        assert_eq!(Unit::from_name(unit.name()), Some(unit));
        assert_eq!(Unit::from_name(&unit.name().to_uppercase()), Some(unit));
    }
    assert_eq!(Unit::from_name("Week"), Some(Unit::Week));
    assert_eq!(Unit::from_name("unknown"), None);
    assert_eq!(Unit::from_name(""), None);
    assert_eq!(Unit::from_number(0), None);
    let yaml =
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: WeEk, requests_per_unit: 3}\n";
    assert_eq!(
        limit(&one(yaml), "d", &[("k", "v")]),
        Some((3, Some(Unit::Week)))
    );
    let missing = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 3}\n";
    assert_eq!(error_of(missing), "test.yaml: invalid rate limit unit ''");
    // Unlimited with a unit no one knows is accepted, as by envoyproxy.
    let odd = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: foo}\n";
    assert!(
        one(odd)
            .domain("d")
            .unwrap()
            .matching(&[("k", "v")])
            .unwrap()
            .rule
            .unlimited
    );
}

#[test]
fn scalars_and_types() {
    let yaml = "domain: d
descriptors:
  - key: n
    value: 123
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: b
    value: true
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: z
    value: 0123
    rate_limit: {unit: second, requests_per_unit: 3}
";
    let c = one(yaml);
    assert_eq!(
        limit(&c, "d", &[("n", "123")]),
        Some((1, Some(Unit::Second)))
    );
    assert_eq!(
        limit(&c, "d", &[("b", "true")]),
        Some((2, Some(Unit::Second)))
    );
    assert_eq!(
        limit(&c, "d", &[("z", "0123")]),
        Some((3, Some(Unit::Second)))
    );
    assert_eq!(limit(&c, "d", &[("z", "123")]), None);
    // Floats where envoyproxy's key check sees them.
    for bad in [
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1.5}\n",
        "domain: d\ndescriptors:\n  - key: k\n    value: 1.5\n",
        "domain: 1.5\n",
    ] {
        assert_eq!(error_of(bad), "test.yaml: error checking config");
    }
    let quoted = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: \"5\"}\n";
    let err = error_of(quoted);
    assert!(
        err.starts_with("test.yaml: error loading config file: "),
        "{err}"
    );
    assert!(
        err.ends_with("cannot unmarshal !!str `5` into uint32"),
        "{err}"
    );
    assert!(error_of(&quoted.replace("\"5\"", "-1")).ends_with("!!int `-1` into uint32"));
    assert!(error_of(&quoted.replace("\"5\"", "4294967296")).ends_with("into uint32"));
    let flag = "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: \"true\"\n";
    assert!(error_of(flag).ends_with("cannot unmarshal !!str `true` into bool"));
    let list = "domain: [a]\n";
    assert_eq!(
        error_of(list),
        "test.yaml: config error, yaml file contains list of type other than map: a"
    );
    let nested = "domain: d\ndescriptors:\n  - key: {a: b}\n";
    assert_eq!(error_of(nested), "test.yaml: config error, unknown key 'a'");
    let map_key = "domain: d\ndescriptors:\n  - key: {key: b}\n";
    assert!(error_of(map_key).ends_with("cannot unmarshal !!map into string"));
    // A known key at another level is ignored, as by envoyproxy.
    let stray = "domain: d\nunit: second\ndescriptors:\n  - key: k\n    domain: x\n";
    assert_eq!(limit(&one(stray), "d", &[("k", "v")]), None);
    // Null and `{}` rate_limit: absent, and present with no unit.
    let null = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n";
    assert_eq!(limit(&one(null), "d", &[("k", "v")]), None);
    let empty = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {}\n";
    assert_eq!(error_of(empty), "test.yaml: invalid rate limit unit ''");
    // requests_per_unit defaults to 0.
    let zero = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour}\n";
    assert_eq!(
        limit(&one(zero), "d", &[("k", "v")]),
        Some((0, Some(Unit::Hour)))
    );
    // A top level that is not a mapping.
    assert!(error_of("- a\n").starts_with("test.yaml: error loading config file: "));
    assert!(error_of("just text\n").starts_with("test.yaml: error loading config file: "));
    assert_eq!(
        error_of(""),
        "test.yaml: config file cannot have empty domain"
    );
    assert_eq!(
        error_of("# only a comment\n"),
        "test.yaml: config file cannot have empty domain"
    );
}

#[test]
fn duplicate_yaml_keys_are_refused() {
    let yaml = "domain: d
descriptors:
  - key: k
    rate_limit:
      unit: second
      unit: hour
      requests_per_unit: 1
";
    let err = error(&[("dup.yaml", yaml)], false);
    assert_eq!(err.to_string(), "dup.yaml: duplicate key 'unit'");
    assert_eq!(err.place(), Some("descriptors[0].rate_limit"));
    assert_eq!(
        error_of("domain: a\ndomain: b\n"),
        "test.yaml: duplicate key 'domain'"
    );
    // Equal resolved values are one key.
    assert_eq!(error_of("1: a\n+1: b\n"), "test.yaml: duplicate key '1'");
    // A second document would be ignored by yaml.v2; refused here.
    let two = "domain: a\n---\ndomain: b\n";
    assert_eq!(
        error_of(two),
        "test.yaml: error loading config file: more than one YAML document"
    );
}

#[test]
fn anchors_and_aliases() {
    let yaml = "domain: d
descriptors:
  - key: a
    rate_limit: &limit {unit: second, requests_per_unit: 7}
  - key: b
    rate_limit: *limit
";
    let c = one(yaml);
    assert_eq!(limit(&c, "d", &[("b", "x")]), Some((7, Some(Unit::Second))));
    // Exponential expansion is capped.
    let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        let p = i - 1;
        bomb.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    let err = error_of(&bomb);
    assert!(err.contains("YAML nodes"), "{err}");
}

#[test]
fn extensions() {
    let yaml = "domain: d
backend:
  kind: redis
  url: \"redis://127.0.0.1/\"
  store_down: open
  timeout_ms: 50
  cluster: [a, b]
descriptors:
  - key: plain
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: bucket
    rate_limit: {unit: minute, requests_per_unit: 60, algorithm: token_bucket, burst: 10}
  - key: leaky
    rate_limit: {unit: minute, requests_per_unit: 60, algorithm: leaky_bucket}
  - key: log
    rate_limit: {unit: minute, requests_per_unit: 60, algorithm: sliding_window_log}
  - key: counter
    rate_limit: {unit: minute, requests_per_unit: 60, algorithm: sliding_window_counter}
";
    let c = one(yaml);
    let d = c.domain("d").unwrap();
    let backend = d.backend.as_ref().unwrap();
    assert_eq!(backend.kind, "redis");
    assert_eq!(backend.text("url"), Some("redis://127.0.0.1/"));
    assert_eq!(backend.text("store_down"), Some("open"));
    assert_eq!(backend.text("timeout_ms"), Some("50"));
    assert_eq!(
        backend.list("cluster"),
        Some(&["a".to_owned(), "b".to_owned()][..])
    );
    assert_eq!(backend.text("cluster"), None);
    assert!(!backend.fields.contains_key("kind"));
    let rule = |k| d.matching(&[(k, "v")]).unwrap().rule;
    assert_eq!(rule("plain").algorithm, AlgorithmKind::FixedWindow);
    assert_eq!(
        (rule("bucket").algorithm, rule("bucket").burst),
        (AlgorithmKind::TokenBucket, Some(10))
    );
    assert_eq!(rule("leaky").algorithm, AlgorithmKind::LeakyBucket);
    assert_eq!(rule("log").algorithm, AlgorithmKind::SlidingWindowLog);
    assert_eq!(
        rule("counter").algorithm,
        AlgorithmKind::SlidingWindowCounter
    );
    let memory = "domain: m\nbackend: {kind: memory}\n";
    assert_eq!(
        one(memory)
            .domain("m")
            .unwrap()
            .backend
            .as_ref()
            .unwrap()
            .kind,
        "memory"
    );
    assert_eq!(one("domain: m\n").domain("m").unwrap().backend, None);
}

#[test]
fn extension_errors() {
    let rl = |body: &str| {
        format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {{unit: second, requests_per_unit: 1, {body}}}\n"
        )
    };
    let err = error(&[("x.yaml", &rl("algorithm: gcra2"))], false);
    assert_eq!(
        err.to_string(),
        "x.yaml: unknown algorithm 'gcra2' (expected one of token_bucket, leaky_bucket, \
         fixed_window, sliding_window_log, sliding_window_counter)"
    );
    assert_eq!(err.place(), Some("descriptors[0].rate_limit.algorithm"));
    assert_eq!(
        error_of(&rl("algorithm: token_bucket, burst: 0")),
        "test.yaml: burst must be at least 1"
    );
    assert_eq!(
        error_of(&rl("burst: 5")),
        "test.yaml: burst applies only to token_bucket and leaky_bucket, not fixed_window"
    );
    assert!(error_of(&rl("algorithm: token_bucket, burst: -1")).ends_with("into uint32"));
    assert!(error_of(&rl("algorithm: [a]")).contains("list of type other than map"));
    let misplaced = "domain: d\ndescriptors:\n  - key: k\n    algorithm: token_bucket\n";
    assert_eq!(
        error_of(misplaced),
        "test.yaml: 'algorithm' is only allowed inside rate_limit"
    );
    assert_eq!(
        error_of("domain: d\nburst: 3\n"),
        "test.yaml: 'burst' is only allowed inside rate_limit"
    );
    let inner = "domain: d\ndescriptors:\n  - key: k\n    backend: {kind: memory}\n";
    assert_eq!(
        error_of(inner),
        "test.yaml: 'backend' is only allowed at the top level"
    );
    let cases = [
        ("backend: redis", "backend must be a mapping"),
        (
            "backend: {url: x}",
            "backend has no kind (expected one of memory, redis, synced, leased)",
        ),
        (
            "backend: {kind: postgres}",
            "unknown backend kind 'postgres' (expected one of memory, redis, synced, leased)",
        ),
        (
            "backend: {kind: redis, pool: {size: 3}}",
            "backend field 'pool' must be a scalar or a list of scalars",
        ),
        (
            "backend: {kind: redis, url: }",
            "backend field 'url' must be a scalar or a list of scalars",
        ),
        (
            "backend: {kind: redis, hosts: [a, [b]]}",
            "backend field 'hosts' must be a scalar or a list of scalars",
        ),
        (
            "backend: {kind: redis, 5: x}",
            "config error, key is not of type string: 5",
        ),
    ];
    for (line, message) in cases {
        let err = error(&[("x.yaml", &format!("domain: d\n{line}\n"))], false);
        assert_eq!(err.message(), message, "{line}");
    }
    // Merged files agree on the backend or give it once.
    let a = "domain: d\nbackend: {kind: memory}\n";
    let b = "domain: d\nbackend: {kind: redis, url: x}\n";
    let none = "domain: d\n";
    assert_eq!(
        error(&[("a.yaml", a), ("b.yaml", b)], true).to_string(),
        "b.yaml: conflicting backend for domain 'd'"
    );
    let c = load(&[("n.yaml", none), ("a.yaml", a), ("a2.yaml", a)], true);
    assert_eq!(
        c.domain("d").unwrap().backend.as_ref().unwrap().kind,
        "memory"
    );
}

#[test]
fn rules_in_file_order() {
    let a = "domain: a\ndescriptors:\n  - key: k1\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    let b = "domain: b\ndescriptors:\n  - key: k2\n    rate_limit: {unit: second, requests_per_unit: 2}\n";
    let a2 = "domain: a\ndescriptors:
  - key: k3
    descriptors:
      - key: k4
        rate_limit: {unit: second, requests_per_unit: 4}
    rate_limit: {unit: second, requests_per_unit: 3}
";
    let c = load(&[("a.yaml", a), ("b.yaml", b), ("a2.yaml", a2)], true);
    let order: Vec<u32> = c.rules().iter().map(|r| r.requests_per_unit).collect();
    assert_eq!(order, [1, 2, 3, 4]);
    let paths: Vec<&str> = c.rules().iter().map(|r| r.path.as_str()).collect();
    assert_eq!(paths, ["a.k1", "b.k2", "a.k3", "a.k3.k4"]);
    let names: Vec<&str> = c.domains().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(c.domain("a").unwrap().rules().len(), 3);
}

/// A fresh directory under the system's temporary one, removed on drop.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!(
            "rategate-rls-{tag}-{}-{nanos}-{n}",
            std::process::id()
        ));
        std::fs::create_dir(&dir).unwrap();
        TempDir(dir)
    }

    fn write(&self, name: &str, bytes: &[u8]) -> std::path::PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn directory_loading() {
    let dir = TempDir::new("dir");
    dir.write("b_key2.yml", MERGE_DOMAIN_KEY2.as_bytes());
    dir.write("a_key1.yaml", MERGE_DOMAIN_KEY1.as_bytes());
    dir.write("notes.txt", b"not: [yaml");
    dir.write("c.yaml.bak", b"not: [yaml");
    std::fs::create_dir(dir.0.join("sub.yaml")).unwrap();
    std::fs::write(dir.0.join("sub.yaml").join("x.yaml"), b"not: [yaml").unwrap();
    let c = Config::load(&dir.0, true).unwrap();
    let d = "test-domain";
    assert_eq!(
        limit(&c, d, &[("key1", "value1")]),
        Some((10, Some(Unit::Minute)))
    );
    assert_eq!(
        limit(&c, d, &[("key2", "value2")]),
        Some((20, Some(Unit::Minute)))
    );
    // Sorted by name: a_key1.yaml loads first, so b_key2.yml is the duplicate.
    let err = Config::load(&dir.0, false).unwrap_err();
    assert_eq!(
        err.to_string(),
        "b_key2.yml: duplicate domain 'test-domain' in config file"
    );
    // A single file is named as given.
    let bad = BAD_LIMIT_UNIT.replace("test-domain", "other");
    let path = dir.write("bad.yaml", bad.as_bytes());
    let err = Config::load(&path, false).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("{}: invalid rate limit unit 'foo'", path.display())
    );
    let err = Config::load(&dir.0, true).unwrap_err();
    assert_eq!(err.to_string(), "bad.yaml: invalid rate limit unit 'foo'");
    // An empty directory loads no domains.
    let empty = TempDir::new("empty");
    assert_eq!(Config::load(&empty.0, false).unwrap().domains().count(), 0);
}

#[test]
fn unreadable_and_oversized_files() {
    let dir = TempDir::new("io");
    let missing = dir.0.join("missing.yaml");
    let err = Config::load(&missing, false).unwrap_err();
    assert!(err.is_io());
    assert_eq!(err.file(), missing.display().to_string());
    assert!(
        err.to_string()
            .starts_with(&format!("{}: cannot read: ", missing.display()))
    );
    assert!(std::error::Error::source(&err).is_some());
    let path = dir.write("latin1.yaml", b"domain: caf\xe9\n");
    let err = Config::load(&path, false).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("{}: config file is not valid UTF-8", path.display())
    );
    let err = Config::load(&dir.0, false).unwrap_err();
    assert_eq!(
        err.to_string(),
        "latin1.yaml: config file is not valid UTF-8"
    );
    let big = format!("domain: d\n# {}\n", "x".repeat(MAX_FILE_BYTES));
    let err = error(&[("big.yaml", &big)], false);
    assert_eq!(
        err.to_string(),
        "big.yaml: config file larger than 4194304 bytes"
    );
    let path = dir.write("big.yaml", big.as_bytes());
    let err = Config::load(&path, false).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("config file larger than 4194304 bytes")
    );
}

#[test]
fn nesting_caps() {
    // 64 levels of descriptors load; 65 do not.
    let nested = |levels: usize| {
        let mut yaml = String::from("domain: d\n");
        for level in 0..levels {
            let indent = "  ".repeat(2 * level);
            yaml.push_str(&format!(
                "{indent}descriptors:\n{indent}  - key: k{level}\n"
            ));
        }
        let indent = "  ".repeat(2 * levels);
        yaml.push_str(&format!(
            "{indent}rate_limit: {{unit: second, requests_per_unit: 9}}\n"
        ));
        yaml
    };
    let c = one(&nested(MAX_DESCRIPTOR_DEPTH));
    let names: Vec<String> = (0..MAX_DESCRIPTOR_DEPTH).map(|i| format!("k{i}")).collect();
    let entries: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "v")).collect();
    assert_eq!(limit(&c, "d", &entries), Some((9, Some(Unit::Second))));
    assert_eq!(
        error_of(&nested(MAX_DESCRIPTOR_DEPTH + 1)),
        "test.yaml: descriptors nested deeper than 64 levels"
    );
    // 10,000 levels, flow and block style: an error, not a stack overflow.
    let mut flow = String::from("domain: d\n");
    for _ in 0..10_000 {
        flow.push_str("descriptors: [{key: k, ");
    }
    flow.push_str(&"}]".repeat(10_000));
    let err = error_of(&flow);
    assert!(err.contains("nesting deeper than 256 levels"), "{err}");
    let block = format!("domain: d\ndescriptors:\n{}k\n", "- ".repeat(10_000));
    let err = error_of(&block);
    assert!(err.contains("nesting deeper than 256 levels"), "{err}");
    let brackets = format!(
        "domain: d\nmetadata: {}{}\n",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let err = error_of(&brackets);
    assert!(err.contains("nesting deeper than 256 levels"), "{err}");
}

/// xorshift64*: a fixed sequence, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn fuzz_never_panics() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // Random bytes, as text.
    for _ in 0..300 {
        let len = rng.below(200);
        let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let text = String::from_utf8_lossy(&bytes);
        let _ = Config::from_sources(&[("f.yaml", &text)], false);
    }
    // Mutations of real files: bytes dropped, swapped for YAML punctuation.
    let tokens = [
        ":",
        "-",
        " ",
        "\n",
        "  ",
        "*",
        "&a",
        "*a",
        "[",
        "]",
        "{",
        "}",
        ",",
        "'",
        "\"",
        "?",
        "!!int",
        "!!str",
        "~",
        "1.5",
        "-1",
        "key: ",
        "value: ",
        "descriptors:",
        "rate_limit:",
        "unit: day",
        "#",
        "|",
        ">",
        "---",
        "<<: ",
        "\t",
        "\\",
    ];
    let seeds = [
        BASIC_CONFIG,
        WILDCARD,
        SHARE_THRESHOLD,
        METADATA,
        REPLACES_SELF,
    ];
    for i in 0..2_000 {
        let seed = seeds[i % seeds.len()];
        let mut text = seed.to_owned();
        for _ in 0..1 + rng.below(4) {
            let mut at = rng.below(text.len() + 1);
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            if rng.below(2) == 0 {
                let mut end = (at + rng.below(8)).min(text.len());
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.replace_range(at..end, "");
            } else {
                text.insert_str(at, tokens[rng.below(tokens.len())]);
            }
        }
        if let Ok(config) = Config::from_sources(&[("f.yaml", &text)], i % 2 == 0) {
            for domain in config.domains() {
                let _ = domain.matching(&[("key1", "value1"), ("subkey1", "x")]);
                let _ = domain.matching(&[("files", "files/a"), ("", "")]);
            }
            let _ = config.rules();
        }
    }
}

#[test]
fn wildcard_match_edges() {
    let parts = |p: &str| p.split('*').map(str::to_owned).collect::<Vec<_>>();
    assert!(wildcard_match(&parts("*"), ""));
    assert!(wildcard_match(&parts("*"), "anything"));
    assert!(wildcard_match(&parts("a*a"), "aa"));
    assert!(!wildcard_match(&parts("a*a"), "a"));
    assert!(wildcard_match(&parts("a**b"), "ab"));
    assert!(!wildcard_match(&parts("a*b*b"), "ab"));
    assert!(wildcard_match(&parts("é*ü"), "éxü"));
    assert!(!wildcard_match(&parts("é*ü"), "éü".get(..2).unwrap_or("")));
    assert!(wildcard_match(&parts("plain"), "plain"));
    assert!(!wildcard_match(&parts("plain"), "plainer"));
}

#[test]
fn first_error_in_document_order() {
    let yaml = "domain: d
descriptors:
  - key: k
    shadow_mode: \"yes\"
    descriptors:
      - key: c
        rate_limit: {unit: second, requests_per_unit: \"x\"}
";
    let err = error(&[("t.yaml", yaml)], false);
    assert_eq!(err.place(), Some("descriptors[0].shadow_mode"));
    let swapped = "domain: d
descriptors:
  - key: k
    descriptors:
      - key: c
        rate_limit: {unit: second, requests_per_unit: \"x\"}
    shadow_mode: \"yes\"
";
    let err = error(&[("t.yaml", swapped)], false);
    assert_eq!(
        err.place(),
        Some("descriptors[0].descriptors[0].rate_limit.requests_per_unit")
    );
    // envoyproxy's phases: every key check before any type check, every
    // file decoded before any is built.
    let phases = "domain: d
descriptors:
  - key: k
    shadow_mode: \"yes\"
  - key: j
    ratelimit: {}
";
    assert_eq!(
        error_of(phases),
        "test.yaml: config error, unknown key 'ratelimit'"
    );
    let err = error(&[("a.yaml", EMPTY_DOMAIN), ("b.yaml", BAD_YAML)], false);
    assert!(
        err.to_string()
            .starts_with("b.yaml: error loading config file")
    );
    // Semantic errors in document order.
    let two = "domain: d
descriptors:
  - key: k
    rate_limit: {unit: fortnight}
  - value: v
";
    assert_eq!(
        error_of(two),
        "test.yaml: invalid rate limit unit 'fortnight'"
    );
}
