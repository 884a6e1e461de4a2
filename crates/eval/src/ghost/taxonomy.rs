//! The fixed label taxonomy of the ghost-call corpus (research notes §5.2): seven sensitive
//! domains of 22 fine-grained labels each (the 154-label menu), 40 neutral topics for
//! false-positive measurement, and the topic-free material a speculative planner mixes in
//! (generic queries and collections, contact names, query framings).
//!
//! Everything here is static data. The tests at the bottom pin the invariants the generator and
//! the adversaries rely on: unique names and slugs, paraphrases that share no content word with
//! their label, domain vocabulary that never names a specific label, and topic-free generic text.

/// One fine-grained sensitive label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FineLabel {
    /// The label itself: 2–5 lower-case words, unique across all labels.
    pub name: &'static str,
    /// 2–6 words with the same meaning that share no content word with `name`.
    pub paraphrase: &'static str,
    /// Kebab-case slug of the topic-bearing destination collection; unique.
    pub slug: &'static str,
    /// One sentence (8–20 words) describing the label as it appears in a label menu.
    pub description: &'static str,
    /// A realistic entity (company, clinic, place, app) mentioned alongside it. It is not a
    /// topic term, but like a real one it can hint at the topic ("Lakeside MS Center") or share
    /// a word with another label: a side channel no topic rewrite removes.
    pub entity: &'static str,
}

/// A sensitive domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Domain {
    /// Domain name: one of the seven domains of [`DOMAINS`].
    pub name: &'static str,
    /// Slug of the domain-level document collection.
    pub slug: &'static str,
    /// Domain-level words and short phrases shared by all labels of the domain; none of their
    /// content words is a word of any label name.
    pub lexicon: &'static [&'static str],
    /// The 22 fine-grained labels of the domain.
    pub labels: &'static [FineLabel],
}

const fn l(
    name: &'static str,
    paraphrase: &'static str,
    slug: &'static str,
    description: &'static str,
    entity: &'static str,
) -> FineLabel {
    FineLabel {
        name,
        paraphrase,
        slug,
        description,
        entity,
    }
}

const HEALTH: &[FineLabel] = &[
    l(
        "early onset dementia",
        "memory loss in midlife",
        "young-memory-decline",
        "Memory and thinking problems that begin well before old age, and what they mean for daily life.",
        "Hollybrook Primary Care",
    ),
    l(
        "gestational diabetes",
        "high glucose while expecting",
        "expecting-glucose-care",
        "Blood sugar that rises during pregnancy and how it is monitored and managed.",
        "Westfield Birth Center",
    ),
    l(
        "miscarriage aftermath",
        "healing after losing a pregnancy",
        "pregnancy-loss-support",
        "Physical and emotional recovery after an early pregnancy ends unexpectedly.",
        "Saint Brigid Obstetrics",
    ),
    l(
        "chronic migraine",
        "recurring severe headaches",
        "headache-disorders",
        "Frequent disabling headaches with nausea or light sensitivity that last for hours or days.",
        "Northgate Neurology Associates",
    ),
    l(
        "panic attacks",
        "sudden episodes of intense fear",
        "anxiety-episodes",
        "Sudden surges of fear with a racing heart, shortness of breath and a sense of dread.",
        "Calmwater Counseling Group",
    ),
    l(
        "bipolar disorder",
        "manic depressive illness",
        "mood-cycling-conditions",
        "A mood condition with alternating periods of elevated energy and deep depression.",
        "Lindenwood Behavioral Services",
    ),
    l(
        "hiv positive result",
        "outcome of an aids virus screening",
        "hiv-screening",
        "What a reactive HIV test means and the next steps after diagnosis.",
        "Mission Bay Community Lab",
    ),
    l(
        "sexually transmitted infection",
        "venereal disease exposure",
        "sti-concerns",
        "Infections passed through sexual contact, their signs, testing options and telling past lovers.",
        "Eastside Walk-In Lab",
    ),
    l(
        "breast lump biopsy",
        "tissue sample from chest mass",
        "breast-tissue-testing",
        "Having a breast lump sampled with a needle and waiting for the pathology findings.",
        "Harborview Imaging Center",
    ),
    l(
        "colonoscopy preparation",
        "getting ready for bowel scope",
        "bowel-scope-prep",
        "Diet changes and bowel cleansing needed before a camera examination of the colon.",
        "Summit Gastroenterology",
    ),
    l(
        "opioid detox",
        "stopping strong painkillers",
        "painkiller-tapering",
        "Withdrawal symptoms and supervised ways of coming off opioids after long-term use.",
        "Pinecrest Pain Management",
    ),
    l(
        "alcohol dependence",
        "heavy drinking problem",
        "drinking-recovery",
        "Physical and psychological reliance on alcohol and ways to cut down or quit.",
        "Hope Harbor Center",
    ),
    l(
        "eating disorder relapse",
        "anorexia or bulimia resurfacing",
        "restrictive-eating-care",
        "Old restrictive eating or purging patterns coming back after a period of recovery.",
        "Willow Springs Residential Program",
    ),
    l(
        "erectile dysfunction",
        "male impotence",
        "mens-intimate-wellness",
        "Difficulty getting or keeping an erection and its common physical and psychological causes.",
        "Keystone Urology Group",
    ),
    l(
        "fertility preservation",
        "freezing eggs or sperm",
        "egg-freezing",
        "Storing eggs, sperm or embryos for later use before treatment or aging reduces fertility.",
        "Bright Horizons Reproductive Institute",
    ),
    l(
        "thyroid nodule",
        "growth in the neck gland",
        "neck-gland-growths",
        "A growth in the thyroid gland found on exam or imaging and how it is evaluated.",
        "Valley Endocrine Associates",
    ),
    l(
        "multiple sclerosis",
        "ms autoimmune nerve condition",
        "ms-support",
        "An autoimmune disease damaging nerve coatings, causing relapses of weakness, numbness or vision problems.",
        "Lakeside MS Center",
    ),
    l(
        "adhd in adults",
        "grown-up attention deficit",
        "adult-attention-focus",
        "Attention, focus and impulsivity difficulties that persist or are first recognized in adulthood.",
        "Brightpath Psychiatry",
    ),
    l(
        "postpartum depression",
        "low mood after giving birth",
        "new-parent-mood",
        "Persistent sadness, anxiety or hopelessness in the months after having a baby.",
        "Meadowview Pediatrics",
    ),
    l(
        "melanoma mole",
        "changing dark spot on skin",
        "skin-spot-checks",
        "Evaluating a mole that has changed in size, shape or color for skin cancer.",
        "Clearview Dermatology",
    ),
    l(
        "sleep apnea",
        "breathing pauses during the night",
        "night-breathing",
        "Repeated pauses in breathing during sleep that cause snoring, fatigue and strain on the heart.",
        "Restwell Pulmonary Lab",
    ),
    l(
        "hepatitis c",
        "long-term liver virus",
        "liver-virus-care",
        "A blood-borne virus that inflames the liver and can now usually be cured.",
        "Bayside Hepatology Group",
    ),
];

const LEGAL: &[FineLabel] = &[
    l(
        "lease termination penalty",
        "fee for breaking a tenancy prematurely",
        "tenant-exit-fees",
        "Costs and penalties for breaking a residential lease before its agreed end date.",
        "Maple Row Properties",
    ),
    l(
        "eviction notice response",
        "landlord demanding i move out",
        "tenant-removal-defense",
        "How to respond when a landlord serves notice to leave a rented home.",
        "Greystone Apartments",
    ),
    l(
        "withheld rental deposit",
        "landlord kept my damage bond",
        "deposit-return-disputes",
        "Recovering funds a landlord kept after move-out for alleged damage or cleaning.",
        "Parkside Lettings",
    ),
    l(
        "dui arrest",
        "booked for impaired driving",
        "impaired-driving-charges",
        "Being arrested for driving under the influence and what follows the arrest.",
        "Harris County Sheriff",
    ),
    l(
        "shoplifting charge",
        "accused of stealing from a store",
        "retail-theft-defense",
        "Being charged with taking merchandise from a shop without paying.",
        "Brightmart Superstore",
    ),
    l(
        "restraining order",
        "stay-away injunction",
        "protective-injunctions",
        "Asking for an order that legally requires someone to stay away from you.",
        "Fairview Police Department",
    ),
    l(
        "joint custody modification",
        "adjusting visitation arrangements",
        "parenting-plan-changes",
        "Changing who the children live with or how much time each parent spends with them.",
        "Jefferson Elementary School",
    ),
    l(
        "contested will",
        "challenging an estate distribution",
        "estate-challenges",
        "Disputing whether a will is valid or whether assets are being divided fairly.",
        "Evergreen Memorial Chapel",
    ),
    l(
        "small claims dispute",
        "suing over a modest sum",
        "minor-sum-claims",
        "Recovering a modest sum from a person or business through a simplified process.",
        "Quickfix Auto Repair",
    ),
    l(
        "non-compete agreement",
        "clause preventing joining rivals",
        "competitor-clauses",
        "Whether a contract term stopping you from working for competitors can be enforced.",
        "Vantage Analytics Inc",
    ),
    l(
        "libel and defamation",
        "someone spreading false statements about me",
        "reputation-harm-claims",
        "Responding to false public statements that damage your reputation in print or on the web.",
        "Northside Neighborhood Association",
    ),
    l(
        "expungement eligibility",
        "sealing old convictions",
        "record-sealing",
        "Whether past convictions or arrests can be cleared or sealed from public records.",
        "Travis County Clerk",
    ),
    l(
        "elder guardianship petition",
        "managing affairs for aging mom",
        "elder-decision-authority",
        "Seeking authority to make decisions for an aging parent who can no longer decide alone.",
        "Sunny Acres Senior Village",
    ),
    l(
        "slip and fall accident",
        "tumbled on a wet floor",
        "premises-injury-claims",
        "Seeking compensation after being hurt by a fall on someone else's premises.",
        "FreshWay Grocery",
    ),
    l(
        "traffic ticket appeal",
        "contesting a speeding citation",
        "speeding-citation-appeals",
        "Challenging a speeding or traffic violation and the points added to a license.",
        "Oakdale Municipal Services",
    ),
    l(
        "prenuptial contract",
        "pre-wedding property pact",
        "pre-wedding-property-pacts",
        "An agreement before marrying that sets out how property is split if the couple separates.",
        "Rosewood Events Venue",
    ),
    l(
        "uncontested divorce",
        "amicable dissolution of wedlock",
        "amicable-dissolution",
        "Ending wedlock when both people agree on every term without a contested trial.",
        "Lakeview Mediation Services",
    ),
    l(
        "copyright infringement letter",
        "cease and desist over pirated content",
        "ip-demand-letters",
        "Receiving or sending a demand to stop using someone's protected creative work.",
        "Pixelhaus Studio",
    ),
    l(
        "surgical negligence suit",
        "botched operation compensation",
        "botched-operation-cases",
        "Holding a surgeon responsible when an operation causes avoidable harm or injury.",
        "St Aldric Regional",
    ),
    l(
        "jury duty excuse",
        "getting out of juror service",
        "juror-service-exemptions",
        "Asking to be excused or postponed from a summons to serve on a jury.",
        "Maricopa County",
    ),
    l(
        "probation violation",
        "breaking terms of supervised release",
        "supervised-release-issues",
        "Consequences of missing check-ins or breaking conditions set by a supervising officer.",
        "Dallas Community Corrections",
    ),
    l(
        "name change petition",
        "taking a different surname officially",
        "surname-changes",
        "The process of formally adopting a new first or last name.",
        "Riverside Vital Records",
    ),
];

const EMPLOYMENT: &[FineLabel] = &[
    l(
        "wrongful dismissal",
        "fired without valid reason",
        "unfair-dismissal",
        "Being let go for illegal reasons or against the terms of an employment agreement.",
        "Corvid Logistics",
    ),
    l(
        "performance improvement plan",
        "formal warning with targets",
        "pip-process",
        "A formal plan setting targets an employee must meet to avoid being dismissed.",
        "Brightline Software",
    ),
    l(
        "severance package negotiation",
        "haggling over a departure payout",
        "exit-pay-talks",
        "Negotiating the pay and benefits offered when leaving a company.",
        "Halvorsen Manufacturing",
    ),
    l(
        "sexual harassment complaint",
        "flagging unwanted advances at work",
        "harassment-reporting",
        "Reporting unwelcome sexual conduct by a colleague or supervisor and what happens next.",
        "Summit Retail Group",
    ),
    l(
        "unpaid overtime wages",
        "working extra hours for free",
        "overtime-pay",
        "Recovering pay for hours worked beyond the standard week that were never paid.",
        "QuickServe Restaurants",
    ),
    l(
        "maternity leave return",
        "going back after childbirth",
        "new-parent-return",
        "Returning to work after maternity leave, including schedules, pumping breaks and role changes.",
        "Pemberton Consulting",
    ),
    l(
        "disability accommodation request",
        "adjustments for an impairment",
        "reasonable-adjustments",
        "Asking for changes to duties or equipment so a disability does not block work.",
        "Northwind Call Center",
    ),
    l(
        "layoff rumors",
        "upcoming staff cuts",
        "staff-cuts",
        "Signs that a company may be cutting staff soon and how to prepare.",
        "Tessellate Games",
    ),
    l(
        "whistleblower retaliation",
        "punished for exposing wrongdoing",
        "speak-up-retaliation",
        "Being demoted, sidelined or fired after reporting fraud or illegal conduct.",
        "Granite Pharma",
    ),
    l(
        "age discrimination",
        "treated unfairly for being older",
        "older-worker-bias",
        "Being passed over, pushed out or mistreated at work because of age.",
        "Lumen Telecom",
    ),
    l(
        "background check failure",
        "pre-hire vetting turned up problems",
        "pre-hire-vetting",
        "A job offer put at risk by findings in a pre-employment screening.",
        "Verity Staffing",
    ),
    l(
        "stress leave",
        "time off for exhaustion",
        "exhaustion-time-off",
        "Taking time away from work because of burnout, stress or mental strain.",
        "Cobalt Engineering",
    ),
    l(
        "unemployment benefits",
        "state aid while out of work",
        "jobless-aid",
        "Applying for state income support after losing a job through no fault of your own.",
        "Keystone Freight",
    ),
    l(
        "merit raise request",
        "asking for higher compensation",
        "raise-requests",
        "Asking an employer for more pay based on performance or market rates.",
        "Arcadia Labs",
    ),
    l(
        "repetitive strain injury",
        "wrist pain from typing all day",
        "typing-strain-claims",
        "Work-related injury from repeated motions and whether workers compensation covers it.",
        "Dataloom Inc",
    ),
    l(
        "demotion grievance",
        "fighting a downgraded role",
        "demotion-disputes",
        "Challenging a move to a lower position, title or pay grade.",
        "Meridian Hotels",
    ),
    l(
        "bullying by supervisor",
        "being picked on by my lead",
        "supervisor-bullying",
        "Repeated intimidation, humiliation or unfair handling from the person who directs your work.",
        "Harbor Point Distribution",
    ),
    l(
        "telework request rejected",
        "refused permission to telecommute",
        "telecommute-requests",
        "A request to work from home being turned down, and the options to appeal.",
        "Axiom Systems",
    ),
    l(
        "union organizing",
        "forming a labor collective",
        "labor-organizing",
        "Coworkers banding together to form a union and the safeguards available to them.",
        "Redline Warehousing",
    ),
    l(
        "gender pay gap",
        "women earning less than men",
        "pay-equity",
        "Unequal pay for comparable work between men and women at the same company.",
        "Sterling Accounting",
    ),
    l(
        "misconduct investigation",
        "inquiry into accusations against me",
        "conduct-inquiries",
        "An internal probe into alleged rule-breaking by an employee and its possible outcomes.",
        "Pacific Rim Airlines",
    ),
    l(
        "poor employment reference",
        "unfavorable recommendation from previous firm",
        "reference-disputes",
        "A former employer giving a negative reference that blocks new opportunities.",
        "Ridgeway Construction",
    ),
];

const FINANCIAL: &[FineLabel] = &[
    l(
        "debt collector calls",
        "agencies hounding me over arrears",
        "collector-call-limits",
        "Aggressive calls and letters from collection agencies and the limits on what they may do.",
        "Midland Associates",
    ),
    l(
        "credit score drop",
        "falling rating after missed installments",
        "credit-rating-repair",
        "A sudden fall in a credit score and how to find out why.",
        "Experian",
    ),
    l(
        "bankruptcy discharge",
        "wiping out debts through insolvency",
        "insolvency-relief",
        "Having remaining debts legally erased at the end of a bankruptcy case.",
        "Summit Furniture Outlet",
    ),
    l(
        "home foreclosure",
        "lender repossessing my residence",
        "house-repossession-help",
        "A lender taking back a house after missed mortgage installments.",
        "Fairway Servicing Co",
    ),
    l(
        "payday loan rollover",
        "renewing a high-interest advance",
        "short-term-lending",
        "Extending a short-term high-cost loan and the fees that pile up each time.",
        "SpeedyAdvance Stores",
    ),
    l(
        "back taxes owed",
        "arrears with revenue authorities",
        "tax-arrears",
        "Unpaid income taxes from earlier years, with penalties, interest and installment agreements.",
        "Beacon Bookkeeping",
    ),
    l(
        "student loan default",
        "behind on college borrowing",
        "education-borrowing",
        "Missing enough student loan installments to be declared in default by the servicer.",
        "Nelnet",
    ),
    l(
        "gambling losses",
        "betting habit draining funds",
        "betting-losses",
        "Funds lost to casinos, sports wagering or gaming apps and how to regain control.",
        "Golden Strike Casino",
    ),
    l(
        "wage garnishment",
        "paycheck seized for creditors",
        "paycheck-seizure",
        "A deduction order taking part of each paycheck to repay a creditor.",
        "Trident Logistics Payroll",
    ),
    l(
        "overdraft fees",
        "charges for going below zero",
        "below-zero-charges",
        "Charges applied when a checking balance drops below zero.",
        "First Harbor Bancorp",
    ),
    l(
        "debt consolidation",
        "merging several balances into one",
        "consolidation-options",
        "Combining several high-interest debts into a single loan with one installment.",
        "Lendwise",
    ),
    l(
        "crypto portfolio crash",
        "digital coin holdings collapsing",
        "digital-coin-downturn",
        "A steep fall in the value of cryptocurrency holdings and what to do next.",
        "Coinbase",
    ),
    l(
        "retirement fund withdrawal",
        "premature pension cash-out",
        "pension-early-access",
        "Taking funds out of a retirement plan before retirement age, with taxes and penalties.",
        "Fidelity",
    ),
    l(
        "inheritance tax",
        "levy on bequeathed assets",
        "bequest-levies",
        "Taxes owed on assets received from someone who has died.",
        "Whitfield Estate Holdings",
    ),
    l(
        "mortgage application rejection",
        "refused house financing",
        "mortgage-rejections",
        "A lender declining a home loan request and the reasons behind it.",
        "Brookfield Realty",
    ),
    l(
        "irs audit",
        "federal examination of my returns",
        "return-examinations",
        "The tax agency reviewing a filed return and asking for supporting records.",
        "Greene and Park CPAs",
    ),
    l(
        "car repossession",
        "vehicle taken by the finance company",
        "auto-repossession",
        "A finance company seizing a car after the borrower falls behind.",
        "Sunset Motors",
    ),
    l(
        "alimony obligations",
        "spousal maintenance due",
        "spousal-maintenance",
        "Regular sums owed to a former husband or wife after divorce and how they are set.",
        "Crestview Payroll",
    ),
    l(
        "utility shutoff",
        "power disconnection looming",
        "utility-disconnections",
        "Warnings that electricity, gas or water service will be cut off for nonpayment.",
        "Pacific Gas and Electric",
    ),
    l(
        "insurance claim denial",
        "insurer declining reimbursement",
        "insurer-rejections",
        "An insurer refusing to pay out a claim and how to appeal the decision.",
        "Allstate",
    ),
    l(
        "ponzi scheme victim",
        "duped by pyramid investment",
        "pyramid-investment-claims",
        "Losing funds in a fraudulent investment that paid early investors with newer deposits.",
        "Crescent Wealth Group",
    ),
    l(
        "capital gains reporting",
        "profit from selling shares",
        "investment-profit-reporting",
        "Reporting profits from selling stocks or property on a tax return.",
        "Vanguard",
    ),
];

const SECURITY: &[FineLabel] = &[
    l(
        "identity theft",
        "impostor using my personal data",
        "impostor-recovery",
        "Someone using your personal information to borrow or make purchases in your name.",
        "Equifax",
    ),
    l(
        "sim swap fraud",
        "phone number ported by carrier trick",
        "number-hijacking",
        "A criminal moving your phone number to their own SIM to intercept texts.",
        "T-Mobile",
    ),
    l(
        "ransomware attack",
        "files locked for extortion",
        "file-extortion-response",
        "Malicious software encrypting files and demanding payment to unlock them.",
        "Brightwater Dental",
    ),
    l(
        "stalkerware detection",
        "spy app installed on mobile",
        "covert-tracking-apps",
        "Finding hidden monitoring apps that someone installed to track your phone.",
        "Samsung",
    ),
    l(
        "mailbox takeover",
        "someone else controlling my inbox",
        "inbox-takeover",
        "Regaining control after someone logs into your email and locks you out.",
        "Gmail",
    ),
    l(
        "phishing link clicked",
        "opened a counterfeit login page",
        "fake-login-pages",
        "What to do after clicking a link in a fraudulent message requesting credentials.",
        "Microsoft 365",
    ),
    l(
        "doxxing by trolls",
        "where i live posted publicly",
        "address-exposure",
        "Your home address or personal details posted publicly to invite harassment.",
        "Reddit",
    ),
    l(
        "deepfake impersonation",
        "fabricated video of me",
        "synthetic-media-abuse",
        "Realistic fake videos or audio created to imitate a real person.",
        "TikTok",
    ),
    l(
        "sextortion blackmail",
        "coerced with intimate images",
        "image-coercion",
        "Someone demanding payment or more images by threatening to share private pictures.",
        "Snapchat",
    ),
    l(
        "hidden gps tracker",
        "location beacon planted secretly",
        "location-beacons",
        "A concealed tracking device attached to a car or bag to follow your movements.",
        "Honda Civic",
    ),
    l(
        "atm skimming",
        "duplicated magstripe at checkout",
        "checkout-cloning",
        "Hidden readers on teller machines or fuel pumps that copy card data.",
        "Shell Station on Fifth",
    ),
    l(
        "leaked credentials",
        "passwords exposed in a dump",
        "credential-dumps",
        "Your usernames and passwords appearing in a published collection from a hacked site.",
        "LinkedIn",
    ),
    l(
        "romance scam",
        "catfished by a con artist",
        "sweetheart-cons",
        "A fraudster building a fake romantic connection online to extract gifts or funds.",
        "Hinge",
    ),
    l(
        "webcam spying",
        "laptop camera turned on remotely",
        "camera-hijacking",
        "Someone secretly activating a computer camera to watch or record you.",
        "Dell XPS",
    ),
    l(
        "cloned social media profile",
        "fake duplicate of my persona",
        "profile-cloning",
        "An impostor copying your photos and profile to message your friends and contacts.",
        "Facebook",
    ),
    l(
        "baby monitor intrusion",
        "nursery device accessed by strangers",
        "nursery-device-intrusion",
        "Strangers gaining access to a connected baby camera and talking through it.",
        "Nanit",
    ),
    l(
        "tech support scam",
        "bogus helpdesk caller",
        "helpdesk-impersonators",
        "Callers pretending to be from a tech company to gain remote access to a computer.",
        "Geek Squad",
    ),
    l(
        "two-factor bypass",
        "verification codes intercepted",
        "code-interception",
        "Attackers getting around login codes through interception, prompt fatigue or fake pages.",
        "Authy",
    ),
    l(
        "wifi router tampering",
        "wireless hub altered by outsider",
        "router-tampering",
        "Someone changing your router settings to spy on or redirect your browsing.",
        "Netgear",
    ),
    l(
        "seed phrase theft",
        "wallet recovery words stolen",
        "wallet-key-theft",
        "Someone obtaining the secret backup words for a crypto wallet and draining it.",
        "Ledger",
    ),
    l(
        "swatting incident",
        "hoax armed raid dispatched",
        "hoax-raid-aftermath",
        "A false emergency report sending armed police to someone's home.",
        "Twitch",
    ),
    l(
        "keylogger malware",
        "keystrokes captured by malicious software",
        "keystroke-capture",
        "Hidden software recording everything typed, including passwords and private messages.",
        "Lenovo ThinkPad",
    ),
];

const RELATIONSHIPS: &[FineLabel] = &[
    l(
        "infidelity suspicion",
        "signs of a cheating mate",
        "cheating-signs",
        "Noticing changes that make you wonder whether a partner is having an affair.",
        "Marriott Downtown",
    ),
    l(
        "coercive control",
        "being dominated and isolated",
        "domination-patterns",
        "A pattern of a partner restricting friends, movements, phone use and decisions.",
        "Verizon",
    ),
    l(
        "domestic violence shelter",
        "escaping abuse safe housing",
        "abuse-refuge",
        "Finding emergency housing and help when leaving a violent home.",
        "YWCA",
    ),
    l(
        "trial separation",
        "living apart for a while",
        "living-apart",
        "Spouses or partners living apart for a set time to decide on the future.",
        "Airbnb",
    ),
    l(
        "co-parenting conflict",
        "disagreements raising kids after splitting",
        "shared-parenting-friction",
        "Ongoing disputes with an ex about rules, schedules and decisions for shared children.",
        "Lincoln Middle School",
    ),
    l(
        "estranged adult child",
        "grown son or daughter not speaking",
        "parent-child-estrangement",
        "When a grown child cuts off contact with a parent for months or years.",
        "Oak Hill Community Church",
    ),
    l(
        "polyamory disclosure",
        "revealing non-monogamous lifestyle",
        "non-monogamy",
        "Telling friends or relatives about having more than one romantic relationship.",
        "Meetup",
    ),
    l(
        "coming out as gay",
        "telling folks i am lgbtq",
        "lgbtq-disclosure",
        "Sharing your sexual orientation with parents, relatives or friends.",
        "Grace Lutheran Church",
    ),
    l(
        "gaslighting tactics",
        "made to question my sanity",
        "reality-distortion",
        "Being manipulated into doubting your own memory, perception or judgment.",
        "WhatsApp",
    ),
    l(
        "broken engagement",
        "wedding plans cancelled",
        "cancelled-engagements",
        "Calling off a planned wedding and handling rings, deposits and announcements.",
        "The Knot",
    ),
    l(
        "widow grief",
        "mourning a late husband",
        "widowhood-mourning",
        "Coping with the death of a husband or wife and the life that comes afterwards.",
        "Greenlawn Cemetery",
    ),
    l(
        "intimacy mismatch",
        "unequal libido between us",
        "desire-mismatch",
        "A couple wanting very different levels of physical closeness.",
        "Hilton Garden Inn",
    ),
    l(
        "in-law interference",
        "meddling parents of my wife",
        "in-law-meddling",
        "A spouse's parents overstepping boundaries in decisions about your home or children.",
        "Cheesecake Factory",
    ),
    l(
        "long distance struggles",
        "missing someone across countries",
        "distance-strain",
        "Keeping closeness alive when living in different cities or time zones.",
        "Delta Air Lines",
    ),
    l(
        "jealousy and possessiveness",
        "envious clingy behavior",
        "possessive-jealousy",
        "Intense jealousy and attempts to limit who someone sees or talks to.",
        "Instagram",
    ),
    l(
        "stepchild resentment",
        "bonus kid rejecting me",
        "blended-kid-tension",
        "A stepchild refusing to accept a new stepparent in a blended household.",
        "Maplewood Little League",
    ),
    l(
        "ghosted by close friend",
        "best pal suddenly vanished",
        "vanished-friends",
        "A longtime friend abruptly cutting off all messages without any explanation.",
        "Discord",
    ),
    l(
        "caring for dying father",
        "looking after a terminally ill dad",
        "end-of-life-caregiving",
        "Balancing work, siblings and exhaustion while caring for a parent near death.",
        "Visiting Angels",
    ),
    l(
        "sibling feud",
        "brothers and sisters at war",
        "sibling-feuds",
        "Long-running conflict between adult siblings over parents, property or old grievances.",
        "Tahoe Pines Cabin",
    ),
    l(
        "consent boundaries",
        "agreeing on limits in bed",
        "bedroom-limits",
        "Talking about what each person is comfortable with sexually and respecting a no.",
        "Hyatt Regency",
    ),
    l(
        "cold feet before marrying",
        "second thoughts about getting hitched",
        "pre-wedding-jitters",
        "Doubts and anxiety about going ahead with an upcoming wedding.",
        "Bella Vista Banquet Hall",
    ),
    l(
        "affair confession",
        "admitting i was unfaithful",
        "confessing-unfaithfulness",
        "Deciding whether and how to tell a partner about cheating.",
        "Holiday Inn Express",
    ),
];

const IMMIGRATION: &[FineLabel] = &[
    l(
        "asylum credibility interview",
        "refugee case questioning",
        "refugee-case-interviews",
        "The interview where officers assess whether an asylum seeker's fear of return is believable.",
        "Newark Federal Building",
    ),
    l(
        "overstayed tourist permit",
        "remained past authorized stay",
        "authorized-stay-lapses",
        "Staying longer than a visitor permit allows and the consequences that follow.",
        "Carnival Cruise Line",
    ),
    l(
        "deportation proceedings",
        "forced expulsion from the country",
        "expulsion-defense",
        "Government efforts to remove a noncitizen and the steps to contest removal.",
        "Otay Mesa",
    ),
    l(
        "green card replacement",
        "updating expiring permanent resident document",
        "permanent-resident-proof",
        "Replacing or renewing a lost or expiring permanent resident card.",
        "Walgreens Photo",
    ),
    l(
        "h1b transfer",
        "specialty occupation holder switching companies",
        "specialty-worker-transfers",
        "Moving an H-1B worker's sponsorship to a new company without losing authorization.",
        "Infosys",
    ),
    l(
        "daca renewal",
        "dreamer deferred action extension",
        "dreamer-deferral",
        "Renewing deferred action for people brought to the country as children.",
        "Valencia College",
    ),
    l(
        "undocumented parent",
        "mom or dad lacking papers",
        "unpapered-relatives",
        "Concerns when a mother or father lives in the country without authorization.",
        "Roosevelt Elementary PTA",
    ),
    l(
        "fiance sponsorship",
        "bringing my betrothed over",
        "betrothed-sponsorship",
        "Bringing a future husband or wife from abroad to marry within ninety days.",
        "Manila Courier Express",
    ),
    l(
        "ead card refusal",
        "authorization document declined",
        "work-authorization-refusals",
        "An application for an employment authorization document being denied, and the next steps.",
        "Amazon Fulfillment",
    ),
    l(
        "naturalization civics test",
        "exam for becoming a citizen",
        "civics-exam-prep",
        "The history and government questions asked during the interview for becoming a citizen.",
        "Hillside Public Library",
    ),
    l(
        "ice detention",
        "held by enforcement agents",
        "enforcement-holds",
        "Being held in an immigration detention facility and how to locate or assist someone.",
        "Adelanto",
    ),
    l(
        "unaccompanied minor arrival",
        "youngster crossing solo",
        "solo-youngster-arrivals",
        "Children arriving without a parent and the shelters and proceedings they face.",
        "Casa Esperanza",
    ),
    l(
        "sponsor income affidavit",
        "earnings guarantee for a newcomer",
        "newcomer-guarantees",
        "A sponsor's signed promise to financially support a relative seeking to immigrate.",
        "Gomez Bakery",
    ),
    l(
        "travel ban waiver",
        "exemption from nationality restrictions",
        "restriction-exemptions",
        "Requesting an exception to entry restrictions that apply to certain nationalities.",
        "Qatar Airways",
    ),
    l(
        "sham nuptials allegation",
        "officials doubting our wedding is genuine",
        "bona-fide-wedding-reviews",
        "Officials questioning whether a couple genuinely wed for love or only for immigration benefits.",
        "Little White Chapel",
    ),
    l(
        "tps designation",
        "temporary humanitarian safe haven",
        "humanitarian-haven",
        "Temporary permission to stay for people from countries hit by war or disaster.",
        "Catholic Charities",
    ),
    l(
        "post-graduation practical training",
        "working after finishing studies abroad",
        "graduate-training-permits",
        "Temporary work authorization for international graduates after completing a degree.",
        "Purdue University",
    ),
    l(
        "english proficiency evidence",
        "language fluency results",
        "language-fluency-proof",
        "Language test scores required for certain permits, degrees or professional licenses.",
        "Pearson",
    ),
    l(
        "prior conviction inadmissibility",
        "barred due to earlier crimes",
        "conviction-inadmissibility",
        "How an old criminal conviction can block admission to the country.",
        "Vancouver Airport",
    ),
    l(
        "relative reunification delays",
        "queue to join kin overseas",
        "relative-reunion-queue",
        "Waiting times for sponsored relatives abroad to be allowed to join their sponsors here.",
        "MoneyGram",
    ),
    l(
        "priority date backlog",
        "bulletin cutoff stretching years",
        "priority-date-waits",
        "Long waits for a green card because yearly caps create backlogs by country.",
        "Fragomen",
    ),
    l(
        "unlawful presence bar",
        "reentry blocked after extended unauthorized period",
        "reentry-bars",
        "Multi-year bans on returning after living in the country without authorization.",
        "Tijuana",
    ),
];

/// The seven sensitive domains, 22 labels each (154 labels in all).
pub const DOMAINS: &[Domain] = &[
    Domain {
        name: "health",
        slug: "health-clinic",
        lexicon: &[
            "doctor",
            "symptoms",
            "diagnosis",
            "treatment",
            "medication",
            "clinic",
            "specialist",
            "medical advice",
            "health",
            "prescription",
            "patient",
            "hospital",
        ],
        labels: HEALTH,
    },
    Domain {
        name: "legal",
        slug: "legal-advice",
        lexicon: &[
            "lawyer",
            "attorney",
            "court",
            "legal rights",
            "lawsuit",
            "legal advice",
            "judge",
            "hearing",
            "filing",
            "liability",
            "statute",
            "litigation",
        ],
        labels: LEGAL,
    },
    Domain {
        name: "employment",
        slug: "human-resources",
        lexicon: &[
            "employer",
            "job",
            "manager",
            "human resources",
            "workplace",
            "coworker",
            "career",
            "salary",
            "colleague",
            "boss",
            "office",
            "employee handbook",
        ],
        labels: EMPLOYMENT,
    },
    Domain {
        name: "financial",
        slug: "money-banking",
        lexicon: &[
            "money",
            "bank",
            "banking",
            "finances",
            "budget",
            "payments",
            "financial advisor",
            "accounts",
            "monthly bills",
            "cash flow",
            "spending",
            "savings",
        ],
        labels: FINANCIAL,
    },
    Domain {
        name: "security",
        slug: "cybersecurity",
        lexicon: &[
            "security",
            "hacked",
            "cybersecurity",
            "privacy",
            "suspicious activity",
            "attacker",
            "compromised",
            "threat",
            "online safety",
            "protection",
            "breach",
            "vulnerability",
        ],
        labels: SECURITY,
    },
    Domain {
        name: "relationships",
        slug: "family-relationship",
        lexicon: &[
            "partner",
            "relationship",
            "family",
            "spouse",
            "marriage",
            "dating",
            "feelings",
            "trust",
            "boyfriend",
            "girlfriend",
            "household",
            "communication",
            "commitment",
        ],
        labels: RELATIONSHIPS,
    },
    Domain {
        name: "immigration",
        slug: "visa-immigration",
        lexicon: &[
            "visa",
            "immigration",
            "citizenship",
            "residency",
            "embassy",
            "consulate",
            "passport",
            "border",
            "migrant",
            "foreign national",
            "immigration status",
            "entry requirements",
        ],
        labels: IMMIGRATION,
    },
];

/// Non-sensitive everyday topics for neutral tasks (false-positive measurement): 40 entries.
pub const NEUTRAL: &[FineLabel] = &[
    l(
        "sourdough starter feeding",
        "keeping wild yeast culture alive",
        "wild-yeast-baking",
        "How often to feed a sourdough starter and how to tell when it is active.",
        "King Arthur Baking",
    ),
    l(
        "tomato seedling transplanting",
        "moving young plants outdoors",
        "garden-seedlings",
        "When and how to move tomato seedlings from indoor pots into the garden.",
        "Burpee Seeds",
    ),
    l(
        "leaky faucet repair",
        "fixing a dripping tap",
        "dripping-tap-fixes",
        "Replacing washers or cartridges to stop a kitchen or bathroom faucet from dripping.",
        "Ace Hardware",
    ),
    l(
        "kyoto temple itinerary",
        "sightseeing route for japanese shrines",
        "japan-shrine-trips",
        "A day-by-day route for visiting the best known temples and gardens in Kyoto.",
        "Japan Rail",
    ),
    l(
        "marathon mileage buildup",
        "weekly runs before a big race",
        "marathon-mileage",
        "A weekly running schedule that builds mileage safely toward a full marathon.",
        "Strava",
    ),
    l(
        "python list comprehension",
        "compact loops in programming code",
        "python-idioms",
        "Writing concise one-line loops that build lists in Python.",
        "Real Python",
    ),
    l(
        "git rebase workflow",
        "replaying commits onto another branch",
        "git-howto",
        "Moving a branch onto a newer base in Git and fixing conflicts along the way.",
        "GitHub",
    ),
    l(
        "cast iron seasoning",
        "oiling a skillet for nonstick cooking",
        "skillet-care",
        "Building and maintaining a nonstick coating on a cast iron pan.",
        "Lodge Cast Iron",
    ),
    l(
        "birdwatching binoculars",
        "optics for spotting wildlife",
        "birding-gear",
        "Choosing magnification and lens size for binoculars used to watch birds.",
        "Audubon Society",
    ),
    l(
        "chess opening repertoire",
        "memorized first moves for board play",
        "chess-openings",
        "A compact set of reliable chess openings for a club player to learn.",
        "Lichess",
    ),
    l(
        "houseplant overwatering",
        "soggy roots on indoor greenery",
        "indoor-plant-care",
        "Signs that a houseplant is getting too much water and how to save it.",
        "The Sill",
    ),
    l(
        "bike chain lubrication",
        "greasing a bicycle drivetrain",
        "bicycle-maintenance",
        "How often to clean and lubricate a bicycle chain for smooth shifting.",
        "REI Co-op",
    ),
    l(
        "knitting cable stitches",
        "twisted patterns in yarn crafts",
        "knitting-techniques",
        "Crossing stitches with a cable needle to make twisted knitted patterns.",
        "Ravelry",
    ),
    l(
        "spreadsheet pivot tables",
        "summarizing rows in excel",
        "spreadsheet-howto",
        "Grouping and summarizing spreadsheet rows with pivot tables in Excel or Sheets.",
        "Microsoft Excel",
    ),
    l(
        "camping tent waterproofing",
        "keeping canvas dry in storms",
        "camping-gear-care",
        "Reapplying seam sealer and water repellent so a tent stays dry in storms.",
        "Coleman",
    ),
    l(
        "espresso grind size",
        "coffee powder coarseness",
        "coffee-brewing",
        "Adjusting how fine coffee is ground to get a balanced espresso shot.",
        "Breville",
    ),
    l(
        "fantasy football draft",
        "picking players for a league",
        "fantasy-sports",
        "Strategies for choosing players in each round of a fantasy football draft.",
        "ESPN Fantasy",
    ),
    l(
        "ceiling paint touch-up",
        "covering marks overhead",
        "interior-painting",
        "Blending fresh paint into an existing ceiling so that repairs show no visible marks.",
        "Sherwin-Williams",
    ),
    l(
        "road trip playlist",
        "tunes for a lengthy drive",
        "driving-music",
        "Putting together music for several hours on the road with friends.",
        "Spotify",
    ),
    l(
        "dog leash manners",
        "teaching a puppy to walk nicely",
        "puppy-manners",
        "Teaching a young dog to walk calmly on a loose leash without pulling.",
        "Petco",
    ),
    l(
        "photo editing presets",
        "saved filters for pictures",
        "photo-editing",
        "Creating and applying reusable color and exposure settings in Lightroom.",
        "Adobe Lightroom",
    ),
    l(
        "pizza dough hydration",
        "moisture ratio in flatbread",
        "pizza-making",
        "How the ratio of water to flour changes the texture of pizza crust.",
        "Ooni",
    ),
    l(
        "vegetable stir fry",
        "quick wok dish with greens",
        "weeknight-recipes",
        "A fast weeknight dinner of vegetables cooked in a hot wok with sauce.",
        "Trader Joes",
    ),
    l(
        "printer driver setup",
        "installing print utilities on computer",
        "printer-howto",
        "Installing the right driver so a computer can find and use a printer.",
        "HP Smart",
    ),
    l(
        "tennis backhand technique",
        "two-handed racquet swing",
        "tennis-coaching",
        "Footwork, grip and follow-through for a consistent two-handed tennis backhand.",
        "Wilson",
    ),
    l(
        "aquarium water cycling",
        "establishing bacteria in a fish tank",
        "aquarium-keeping",
        "Building up helpful bacteria in a new aquarium before adding any fish.",
        "Petsmart",
    ),
    l(
        "birthday party games",
        "fun contests for a celebration",
        "party-planning",
        "Simple games and activities that keep guests entertained at a birthday party.",
        "Party City",
    ),
    l(
        "snow tire changeover",
        "mounting winter wheels",
        "seasonal-tire-care",
        "When to switch to winter tires and what to inspect during the changeover.",
        "Discount Tire",
    ),
    l(
        "summer cocktail recipes",
        "mixed drinks for hot weather",
        "cocktail-recipes",
        "Refreshing drinks with fruit, herbs and sparkling water for warm evenings.",
        "Total Wine",
    ),
    l(
        "bookshelf assembly instructions",
        "putting together flat-pack shelving",
        "furniture-assembly",
        "Step-by-step assembly of a flat-pack bookshelf, including anchoring it to the wall.",
        "IKEA",
    ),
    l(
        "art museum admission",
        "gallery entrance costs",
        "museum-visits",
        "Admission prices, discounts and free days for popular art and history museums.",
        "The Met",
    ),
    l(
        "yoga for beginners",
        "introductory stretching poses",
        "yoga-basics",
        "Gentle poses and breathing exercises for someone starting yoga without a class.",
        "Down Dog",
    ),
    l(
        "meal prep containers",
        "boxes for batch cooking",
        "meal-prep",
        "Choosing reusable containers for cooking a week of lunches in advance.",
        "Pyrex",
    ),
    l(
        "solar eclipse viewing",
        "watching the moon block sunlight",
        "sky-watching",
        "Where and how to safely watch a solar eclipse with proper glasses.",
        "NASA",
    ),
    l(
        "guitar chord progressions",
        "harmony sequences for strumming",
        "guitar-lessons",
        "Common sequences of chords that beginners use to play popular songs.",
        "Fender Play",
    ),
    l(
        "rain gutter cleaning",
        "clearing leaves from roof channels",
        "gutter-maintenance",
        "Removing leaves and debris from gutters before the autumn storms arrive.",
        "Lowes",
    ),
    l(
        "european rail passes",
        "continental train tickets",
        "rail-journeys",
        "Comparing multi-country train passes with single tickets for a European trip.",
        "Eurail",
    ),
    l(
        "keyboard shortcuts windows",
        "hotkeys for faster computing",
        "desktop-shortcuts",
        "Handy key combinations that speed up everyday tasks on a Windows computer.",
        "Microsoft Windows",
    ),
    l(
        "pickleball paddle choice",
        "selecting racquet gear",
        "pickleball-gear",
        "Comparing paddle weight, grip size and surface texture for pickleball players.",
        "Selkirk Sport",
    ),
    l(
        "crossword puzzle strategies",
        "tips for solving word grids",
        "word-puzzles",
        "Techniques for filling in tricky crossword clues and themed puzzles.",
        "New York Times Games",
    ),
];

/// Generic, topic-free query texts a speculative planner also issues: 40 entries.
pub const GENERIC_QUERIES: &[&str] = &[
    "weekly opening schedule",
    "latest updates",
    "contact details",
    "events next week",
    "recent messages",
    "meeting notes from last week",
    "schedule for tomorrow",
    "weather forecast today",
    "unread messages",
    "shared folder from yesterday",
    "availability next week",
    "directions and parking information",
    "frequently asked questions",
    "recently viewed documents",
    "newsletter archive",
    "holiday closures",
    "team announcements",
    "pending tasks",
    "followup reminders",
    "main reception desk",
    "recent downloads",
    "what changed since monday",
    "customer desk schedule",
    "mailing address",
    "how to reschedule",
    "confirmation email",
    "deadlines this month",
    "general inquiries",
    "notes from the last conversation",
    "things to do this weekend",
    "summary of this month",
    "list of open items",
    "nearest parking garage",
    "currency conversion table",
    "todo list for today",
    "reply to latest email",
    "who is available tomorrow",
    "agenda for next meeting",
    "saved bookmarks",
    "display settings",
];

/// Generic document collections (slugs) with no topic: 12 entries.
pub const GENERIC_COLLECTIONS: &[&str] = &[
    "shared-drive",
    "general-docs",
    "team-wiki",
    "message-archive",
    "meeting-notes",
    "knowledge-base",
    "shelf-library",
    "recent-uploads",
    "archive-2024",
    "scratch-notes",
    "downloads",
    "misc-uploads",
];

/// Person names (first last) for contacts, CRM records and email: 30 entries.
pub const PEOPLE: &[&str] = &[
    "Maria Gonzalez",
    "James Okafor",
    "Priya Natarajan",
    "Daniel Kim",
    "Sarah Whitaker",
    "Ahmed Hassan",
    "Emily Chen",
    "Lucas Moreau",
    "Fatima Al-Sayed",
    "Tom Brennan",
    "Aiko Tanaka",
    "Rachel Goldberg",
    "Marcus Johnson",
    "Sofia Rossi",
    "Kwame Mensah",
    "Hannah Schmidt",
    "Diego Ramirez",
    "Olivia Bennett",
    "Ravi Patel",
    "Grace Liu",
    "Noah Fischer",
    "Amara Nwosu",
    "Ethan Walsh",
    "Isabel Duarte",
    "Mikhail Petrov",
    "Leila Karimi",
    "Ben Carter",
    "Chloe Dubois",
    "Samuel Adeyemi",
    "Nora Lindqvist",
];

/// Query framings with one `{}` placeholder for a topic phrase: 20 entries, the first 10 in the
/// first person, the last 10 neutral.
pub const FRAMES: &[&str] = &[
    "should I worry about {}",
    "what happens with my {}",
    "{} options for me",
    "how do I deal with {}",
    "what should I do about my {}",
    "can I get help with {}",
    "is my {} serious",
    "who can explain {} near me",
    "who do I talk to about {}",
    "my {} next steps",
    "{} overview",
    "guide to {}",
    "{} explained",
    "common questions about {}",
    "{} basics",
    "latest information on {}",
    "{} checklist",
    "understanding {}",
    "{} reading list",
    "how {} works",
];

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    const STOPWORDS: &[&str] = &[
        "a", "an", "the", "of", "for", "to", "in", "on", "with", "and", "or", "my", "your",
        "about", "after", "before", "from", "by", "at", "is", "how", "what",
    ];

    /// Lower-case words of free text: split on anything but letters, digits and hyphens.
    fn words(s: &str) -> Vec<String> {
        s.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .map(|w| w.trim_matches('-').to_ascii_lowercase())
            .filter(|w| !w.is_empty())
            .collect()
    }

    fn content_words(s: &str) -> BTreeSet<String> {
        words(s)
            .into_iter()
            .filter(|w| !STOPWORDS.contains(&w.as_str()))
            .collect()
    }

    fn all_labels() -> impl Iterator<Item = (&'static str, &'static FineLabel)> {
        DOMAINS
            .iter()
            .flat_map(|d| d.labels.iter().map(move |l| (d.name, l)))
    }

    /// Content words of every lexicon entry of every domain, with the domain they belong to.
    fn lexicon_words() -> Vec<(&'static str, String)> {
        DOMAINS
            .iter()
            .flat_map(|d| {
                d.lexicon
                    .iter()
                    .flat_map(|e| content_words(e))
                    .map(move |w| (d.name, w))
            })
            .collect()
    }

    fn is_phrase(s: &str) -> bool {
        !s.is_empty()
            && s.split(' ').all(|w| {
                !w.is_empty()
                    && !w.starts_with('-')
                    && !w.ends_with('-')
                    && !w.contains("--")
                    && w.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            })
    }

    fn is_kebab(s: &str) -> bool {
        !s.is_empty()
            && !s.starts_with('-')
            && !s.ends_with('-')
            && !s.contains("--")
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    }

    fn check_label_shape(l: &FineLabel) {
        assert!(is_phrase(l.name), "bad name {:?}", l.name);
        assert!(is_phrase(l.paraphrase), "bad paraphrase {:?}", l.paraphrase);
        assert!(is_kebab(l.slug), "bad slug {:?}", l.slug);
        let n = l.name.split(' ').count();
        assert!((2..=5).contains(&n), "name {:?} has {n} words", l.name);
        let p = l.paraphrase.split(' ').count();
        assert!(
            (2..=6).contains(&p),
            "paraphrase {:?} has {p} words",
            l.paraphrase
        );
        let d = l.description.split_whitespace().count();
        assert!(
            (8..=20).contains(&d),
            "description of {:?} has {d} words",
            l.name
        );
        assert!(l.description.is_ascii() && l.entity.is_ascii());
        assert!(l.description.ends_with('.'), "{:?}", l.description);
        assert!(
            l.description.matches('.').count() == 1,
            "one sentence: {:?}",
            l.description
        );
        assert!(
            l.description.starts_with(|c: char| c.is_ascii_uppercase()),
            "{:?}",
            l.description
        );
        assert!(!l.entity.trim().is_empty() && l.entity.trim() == l.entity);
        let shared: Vec<_> = content_words(l.name)
            .intersection(&content_words(l.paraphrase))
            .cloned()
            .collect();
        assert!(
            shared.is_empty(),
            "{:?} / {:?} share {shared:?}",
            l.name,
            l.paraphrase
        );
    }

    #[test]
    fn seven_domains_of_twenty_two() {
        let names: Vec<_> = DOMAINS.iter().map(|d| d.name).collect();
        assert_eq!(
            names,
            [
                "health",
                "legal",
                "employment",
                "financial",
                "security",
                "relationships",
                "immigration"
            ]
        );
        for d in DOMAINS {
            assert_eq!(d.labels.len(), 22, "{}", d.name);
            assert!(
                (10..=14).contains(&d.lexicon.len()),
                "{} lexicon has {}",
                d.name,
                d.lexicon.len()
            );
            assert!(is_kebab(d.slug));
            let own: BTreeSet<String> = d.lexicon.iter().flat_map(|e| content_words(e)).collect();
            for w in d.slug.split('-') {
                assert!(
                    w == d.name || own.contains(w),
                    "domain slug {:?} word {w:?} is not {} vocabulary",
                    d.slug,
                    d.name
                );
            }
            for e in d.lexicon {
                assert!(is_phrase(e), "bad lexicon entry {e:?}");
            }
        }
        assert_eq!(all_labels().count(), 154);
    }

    #[test]
    fn label_shapes() {
        for (_, l) in all_labels() {
            check_label_shape(l);
        }
        for l in NEUTRAL {
            check_label_shape(l);
        }
    }

    #[test]
    fn names_are_unique() {
        let mut seen = BTreeSet::new();
        for l in all_labels().map(|(_, l)| l).chain(NEUTRAL) {
            assert!(seen.insert(l.name), "duplicate name {:?}", l.name);
        }
        assert_eq!(seen.len(), 194);
    }

    #[test]
    fn paraphrases_and_entities_are_unique() {
        let mut p = BTreeSet::new();
        let mut e = BTreeSet::new();
        for l in all_labels().map(|(_, l)| l).chain(NEUTRAL) {
            assert!(
                p.insert(l.paraphrase),
                "duplicate paraphrase {:?}",
                l.paraphrase
            );
            assert!(e.insert(l.entity), "duplicate entity {:?}", l.entity);
        }
    }

    #[test]
    fn slugs_are_unique() {
        let mut seen = BTreeSet::new();
        let slugs = all_labels()
            .map(|(_, l)| l.slug)
            .chain(NEUTRAL.iter().map(|l| l.slug))
            .chain(DOMAINS.iter().map(|d| d.slug))
            .chain(GENERIC_COLLECTIONS.iter().copied());
        for s in slugs {
            assert!(is_kebab(s), "bad slug {s:?}");
            assert!(seen.insert(s), "duplicate slug {s:?}");
        }
        assert_eq!(seen.len(), 154 + 40 + 7 + 12);
    }

    /// The spec's rule (no lexicon entry is a word of another domain's label names) plus the
    /// stricter one this taxonomy keeps: no lexicon content word is a word of ANY label name, so
    /// a domain-only query is equally consistent with every sibling.
    #[test]
    fn lexicon_never_names_a_label() {
        for (dom, w) in lexicon_words() {
            for (ldom, l) in all_labels() {
                assert!(
                    !words(l.name).contains(&w),
                    "{dom} lexicon word {w:?} is in {ldom} label {:?}",
                    l.name
                );
            }
            for l in NEUTRAL {
                assert!(
                    !words(l.name).contains(&w),
                    "{dom} lexicon word {w:?} in neutral {:?}",
                    l.name
                );
            }
        }
        // Whole entries, as the spec states it (implied by the above, kept explicit).
        for d in DOMAINS {
            for e in d.lexicon {
                for other in DOMAINS.iter().filter(|o| o.name != d.name) {
                    for l in other.labels {
                        assert!(!format!(" {} ", l.name).contains(&format!(" {e} ")));
                    }
                }
            }
        }
    }

    /// Other domains' vocabulary does not leak into a label's paraphrase or menu description,
    /// nor into neutral topics.
    #[test]
    fn lexicon_stays_in_its_domain() {
        let mut bad = Vec::new();
        for (dom, w) in lexicon_words() {
            for (ldom, l) in all_labels().filter(|(ld, _)| *ld != dom) {
                for text in [l.paraphrase, l.description] {
                    if words(text).contains(&w) {
                        bad.push(format!("{dom} word {w:?} in {ldom} text {text:?}"));
                    }
                }
            }
            for l in NEUTRAL {
                for text in [l.name, l.paraphrase, l.description] {
                    if words(text).contains(&w) {
                        bad.push(format!("{dom} word {w:?} in neutral text {text:?}"));
                    }
                }
            }
        }
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }

    /// Each label's name has a content word found in no other label name (sensitive or neutral),
    /// and no content word of a label name recurs in the names of another domain (or of the
    /// neutral topics).
    #[test]
    fn names_are_distinctive() {
        let labels: Vec<(&str, &FineLabel)> = all_labels()
            .chain(NEUTRAL.iter().map(|l| ("neutral", l)))
            .collect();
        let mut owners: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
        let mut count: BTreeMap<String, usize> = BTreeMap::new();
        for (d, l) in &labels {
            for w in content_words(l.name) {
                owners.entry(w.clone()).or_default().insert(d);
                *count.entry(w).or_default() += 1;
            }
        }
        let mut bad = Vec::new();
        for (d, l) in &labels {
            if !content_words(l.name).iter().any(|w| count[w] == 1) {
                bad.push(format!("{d} label {:?} has no word of its own", l.name));
            }
        }
        for (w, ds) in &owners {
            if ds.len() > 1 {
                bad.push(format!("name word {w:?} used across {ds:?}"));
            }
        }
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }

    /// A paraphrase points at its own label only: none of its content words is a word of
    /// another label's name.
    #[test]
    fn paraphrases_do_not_name_other_labels() {
        // Particles and pronouns that carry no topic, on top of the stopwords.
        const FUNCTION: &[&str] = &[
            "out", "off", "up", "back", "over", "into", "through", "while", "as", "i", "me", "am",
            "are", "was", "be", "being", "not", "our", "their", "they", "us", "someone",
        ];
        let labels: Vec<&FineLabel> = all_labels().map(|(_, l)| l).chain(NEUTRAL).collect();
        let mut bad = Vec::new();
        for a in &labels {
            let mut pw = content_words(a.paraphrase);
            pw.retain(|w| !FUNCTION.contains(&w.as_str()));
            for b in labels.iter().filter(|b| b.name != a.name) {
                let bw = content_words(b.name);
                let shared: Vec<_> = pw.intersection(&bw).collect();
                if !shared.is_empty() {
                    bad.push(format!(
                        "paraphrase {:?} shares {shared:?} with label {:?}",
                        a.paraphrase, b.name
                    ));
                }
            }
        }
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }

    /// 40 unique neutral topics whose texts and slugs share no content word with any sensitive
    /// label name.
    #[test]
    fn neutral_topics() {
        assert_eq!(NEUTRAL.len(), 40);
        let names: BTreeSet<_> = NEUTRAL.iter().map(|l| l.name).collect();
        assert_eq!(names.len(), 40);
        let sensitive: BTreeSet<String> = all_labels()
            .flat_map(|(_, l)| content_words(l.name))
            .collect();
        let mut bad = Vec::new();
        for l in NEUTRAL {
            let slug = l.slug.replace('-', " ");
            for text in [l.name, l.paraphrase, slug.as_str(), l.description] {
                let hit: Vec<_> = content_words(text)
                    .into_iter()
                    .filter(|w| sensitive.contains(w) && w != "as")
                    .collect();
                if !hit.is_empty() {
                    bad.push(format!("neutral {:?}: {text:?} has {hit:?}", l.name));
                }
            }
        }
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }

    /// Generic texts and entities carry no topic: no content word of theirs is a lexicon word
    /// or a word of any sensitive label name.
    #[test]
    fn generic_material_is_topic_free() {
        let mut topical: BTreeSet<String> = lexicon_words().into_iter().map(|(_, w)| w).collect();
        for (_, l) in all_labels() {
            topical.extend(content_words(l.name));
        }
        // Generic material must not share a word with any label's name or paraphrase either
        // (the adversaries would read it as topic evidence); entities may (see `entity`).
        let mut paraphrased = topical.clone();
        for (_, l) in all_labels() {
            // Pronouns ("I", "me") are stopwords for the adversaries.
            paraphrased.extend(
                content_words(l.paraphrase)
                    .into_iter()
                    .filter(|w| w.len() > 2),
            );
        }
        let bad = std::cell::RefCell::new(Vec::new());
        let check = |what: &str, text: &str| {
            let set = if what.contains("entity") {
                &topical
            } else {
                &paraphrased
            };
            let hit: Vec<_> = content_words(text)
                .into_iter()
                .filter(|w| set.contains(w))
                .collect();
            if !hit.is_empty() {
                bad.borrow_mut()
                    .push(format!("{what} {text:?} carries topical {hit:?}"));
            }
        };
        assert_eq!(GENERIC_QUERIES.len(), 40);
        assert_eq!(
            GENERIC_QUERIES.iter().collect::<BTreeSet<_>>().len(),
            40,
            "generic queries unique"
        );
        for q in GENERIC_QUERIES {
            assert!(is_phrase(q), "bad generic query {q:?}");
            check("generic query", q);
        }
        assert_eq!(GENERIC_COLLECTIONS.len(), 12);
        for c in GENERIC_COLLECTIONS {
            check("generic collection", &c.replace('-', " "));
        }
        for f in FRAMES {
            check("frame", &f.replace("{}", " "));
        }
        for (_, l) in all_labels() {
            check("entity", l.entity);
        }
        for l in NEUTRAL {
            check("neutral entity", l.entity);
        }
        let bad = bad.into_inner();
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }

    #[test]
    fn people() {
        assert_eq!(PEOPLE.len(), 30);
        assert_eq!(PEOPLE.iter().collect::<BTreeSet<_>>().len(), 30);
        for p in PEOPLE {
            let parts: Vec<_> = p.split(' ').collect();
            assert_eq!(parts.len(), 2, "{p:?}");
            for part in parts {
                assert!(part.starts_with(|c: char| c.is_ascii_uppercase()), "{p:?}");
                assert!(part.chars().all(|c| c.is_ascii_alphabetic() || c == '-'));
            }
        }
    }

    #[test]
    fn frames() {
        assert_eq!(FRAMES.len(), 20);
        assert_eq!(FRAMES.iter().collect::<BTreeSet<_>>().len(), 20);
        let first_person = |f: &str| {
            words(&f.replace("{}", " "))
                .iter()
                .any(|w| matches!(w.as_str(), "i" | "my" | "me"))
        };
        for f in FRAMES {
            assert_eq!(f.matches("{}").count(), 1, "{f:?}");
            assert!(
                is_phrase(&f.replace("{}", "x").to_ascii_lowercase()),
                "{f:?}"
            );
            assert!(
                f.chars().filter(char::is_ascii_uppercase).all(|c| c == 'I'),
                "{f:?}"
            );
        }
        assert!(FRAMES[..10].iter().all(|f| first_person(f)));
        assert!(FRAMES[10..].iter().all(|f| !first_person(f)));
    }
}
