//! Property tests of the override, sweep and range grammars: arbitrary input never panics, and
//! what parses means what it says.

use proptest::prelude::*;
use rlx::spec::node::Value;
use rlx::spec::overrides::{self, SweepArg};
use rlx::spec::schema::Validator;

fn validator() -> &'static Validator {
    static V: std::sync::OnceLock<Validator> = std::sync::OnceLock::new();
    V.get_or_init(Validator::new)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_overrides_never_panic(s in ".{0,60}") {
        let _ = overrides::parse(&s);
        let _ = overrides::parse_sweep(&s, validator());
        let _ = overrides::looks_like_override(&s);
    }

    #[test]
    fn structured_overrides_never_panic(
        key in "[a-z_.0-9]{0,20}",
        value in r#"[\[\]{},'"a-z0-9.:\- ]{0,30}"#,
    ) {
        let arg = format!("{key}={value}");
        let _ = overrides::parse(&arg);
        let _ = overrides::parse_sweep(&arg, validator());
    }

    #[test]
    fn ranges_never_panic(
        key in "[a-z_.]{0,12}",
        name in "(uniform|loguniform|range|choice|unifrom|rnge|f)",
        args in r#"[\[\]{},'"a-z0-9.:eE+\- ()]{0,30}"#,
    ) {
        let arg = format!("{key}={name}({args})");
        if let Ok(Some(r)) = rlx::spec::sample::parse(&arg) {
            let _ = r.to_axis();
        }
        let _ = rlx::spec::sample::parse(&format!("{key}={name}({args}"));
    }

    #[test]
    fn python_ranges(start in -50i64..50, stop in -50i64..50, step in -7i64..7) {
        prop_assume!(step != 0);
        let expected: Vec<i64> = if step > 0 {
            (start..stop).step_by(step as usize).collect()
        } else {
            std::iter::successors(Some(start), |v| Some(v + step)).take_while(|v| *v > stop).collect()
        };
        match rlx::spec::sample::parse(&format!("seed=range({start},{stop},{step})")) {
            Ok(Some(r)) => {
                let axis = r.to_axis().unwrap();
                let got: Vec<i64> = axis.values.iter().map(|v| match v.value { Value::Int(i) => i, _ => panic!("{v:?}") }).collect();
                prop_assert_eq!(got, expected);
            }
            Err(e) => prop_assert!(expected.is_empty(), "{:?}", e),
            Ok(None) => prop_assert!(false, "not a range"),
        }
    }

    #[test]
    fn integers_round_trip(key in "[a-z]{1,8}(\\.[a-z]{1,8}){0,3}", n in any::<i64>()) {
        let o = overrides::parse(&format!("{key}={n}")).unwrap();
        prop_assert_eq!(o.dotted(), rlx::spec::schema::expand_alias(&key));
        prop_assert!(matches!(o.value.value, Value::Int(v) if v == n));
    }

    #[test]
    fn list_axes_have_one_member_per_value(vals in proptest::collection::vec(-1000i64..1000, 1..8)) {
        let list = vals.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
        for arg in [format!("seed=[{list}]"), format!("seed={list}")] {
            match overrides::parse_sweep(&arg, validator()) {
                Ok(SweepArg::Axis(a)) => {
                    prop_assert_eq!(a.values.len(), vals.len());
                    for (v, n) in a.values.iter().zip(&vals) {
                        prop_assert!(matches!(v.value, Value::Int(x) if x == *n));
                    }
                }
                Ok(SweepArg::Fixed(o)) => prop_assert!(vals.len() == 1 && !arg.contains('['), "fixed: {:?}", o.raw),
                Err(e) => prop_assert!(false, "{:?}", e),
            }
        }
    }

    #[test]
    fn arbitrary_yaml_never_panics(s in "(?s).{0,200}") {
        let src = rlx::spec::source::Source::file(std::path::Path::new("p.yaml"), s);
        if let Ok(tree) = rlx::spec::node::parse(&src) {
            let _ = validator().validate(&tree);
        }
    }
}
